#!/usr/bin/env python3
"""Golden values for the RL estimators and losses (tests/rl/rl_math_test.cpp),
computed with NumPy straight from the papers' formulas, independently of the
C++ (LibTorch) implementation.

  python3 scripts/rl_golden.py tests/rl/golden.json

GAE (Schulman et al. 2016) over each row's action tokens; GRPO group
normalisation (Shao et al. 2024); RLOO (Ahmadian et al. 2024); PPO clipped
surrogate with clip-higher (DAPO, Yu et al. 2025) and dual clip (Ye et al. 2020);
clipped value loss; k1/k3 KL estimators (Schulman 2020); DAPO's soft overlong
punishment and dynamic-sampling filter; AdamW (Loshchilov & Hutter 2019, the
bias-corrected form torch.optim uses) after global-norm gradient clipping.
"""
import json
import sys

import numpy as np

rng = np.random.default_rng(20261130)
B, T = 5, 14


def masks():
    m = np.zeros((B, T), dtype=bool)
    m[0, 3:14] = True                     # one turn, no padding
    m[1, 2:6] = True                      # two turns: tool output at 6..8 masked
    m[1, 9:12] = True
    m[2, 5:7] = True                      # short, then padding
    m[3, :] = False                       # nothing generated
    m[4, 0:14:2] = True                   # alternating
    return m


def gae(rewards, values, mask, gamma, lam):
    adv = np.zeros_like(rewards)
    for b in range(rewards.shape[0]):
        idx = np.nonzero(mask[b])[0]
        last, next_value = 0.0, 0.0
        for t in idx[::-1]:
            delta = rewards[b, t] + gamma * next_value - values[b, t]
            last = delta + gamma * lam * last
            adv[b, t] = last
            next_value = values[b, t]
    returns = np.where(mask, adv + values, 0.0)
    return adv, returns


def group_norm(scores, groups, divide_std, eps):
    out = np.zeros_like(scores)
    for g in np.unique(groups):
        sel = groups == g
        mean = scores[sel].mean()
        std = scores[sel].std(ddof=1) if sel.sum() > 1 else 0.0
        out[sel] = (scores[sel] - mean) / (std + eps) if divide_std else scores[sel] - mean
    return out


def rloo(scores, groups):
    out = np.zeros_like(scores)
    for g in np.unique(groups):
        sel = np.nonzero(groups == g)[0]
        n = len(sel)
        for i in sel:
            out[i] = scores[i] - (scores[sel].sum() - scores[i]) / (n - 1) if n > 1 else 0.0
    return out


def aggregate(per_token, mask, mode, tokens, sequences):
    if mode == "token_mean":
        return float((per_token * mask).sum() / tokens)
    total = 0.0
    for b in range(per_token.shape[0]):
        n = mask[b].sum()
        if n > 0:
            total += (per_token[b] * mask[b]).sum() / n
    return total / sequences


def policy_loss(logp, old, adv, mask, eps_low, eps_high, dual, mode, tokens, sequences):
    ratio = np.exp(logp - old)
    s1 = ratio * adv
    s2 = np.clip(ratio, 1 - eps_low, 1 + eps_high) * adv
    loss = -np.minimum(s1, s2)
    dual_hit = np.zeros_like(mask)
    if dual > 0:
        capped = np.minimum(loss, -dual * adv)  # only where adv < 0
        dual_hit = (adv < 0) & (capped < loss)
        loss = np.where(adv < 0, capped, loss)
    m = mask.astype(bool)
    n = max(m.sum(), 1)
    return {
        "loss": aggregate(loss, m, mode, tokens, sequences),
        "clip_fraction_low": float(((ratio < 1 - eps_low) & (adv < 0) & m).sum() / n),
        "clip_fraction_high": float(((ratio > 1 + eps_high) & (adv > 0) & m).sum() / n),
        "dual_clip_fraction": float((dual_hit & m).sum() / n),
        "approx_kl": float((0.5 * (logp - old) ** 2 * m).sum() / n),
        "ratio_mean": float((ratio * m).sum() / n),
        "ratio_max": float(ratio[m].max()),
        "ratio_min": float(ratio[m].min()),
    }


def value_loss(v, old_v, ret, mask, eps, mode, tokens, sequences):
    clipped = old_v + np.clip(v - old_v, -eps, eps)
    loss = 0.5 * np.maximum((v - ret) ** 2, (clipped - ret) ** 2)
    m = mask.astype(bool)
    frac = float((((clipped - ret) ** 2 > (v - ret) ** 2) & m).sum() / max(m.sum(), 1))
    return aggregate(loss, m, mode, tokens, sequences), frac


def overlong(length, max_len, cache):
    if length <= max_len - cache:
        return 0.0
    if length <= max_len:
        return (max_len - cache - length) / cache
    return -1.0


def entropy(logits):
    z = logits - logits.max(-1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    return -(p * np.log(p)).sum(-1)


def explained_variance(v, ret, mask):
    m = mask.astype(bool)
    r, d = ret[m], ret[m] - v[m]
    return float(1 - d.var(ddof=1) / r.var(ddof=1))


def adamw_with_clipping(params, grads_per_step, lr, betas, eps, wd, max_norm):
    """Each step: clip all gradients together to max_norm, decay, then Adam."""
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    steps = []
    for t, grads in enumerate(grads_per_step, start=1):
        norm = float(np.sqrt(sum((g ** 2).sum() for g in grads)))
        coef = max_norm / (norm + 1e-6) if norm > max_norm else 1.0
        for i, g in enumerate(grads):
            g = g * coef
            params[i] = params[i] * (1 - lr * wd)
            m[i] = betas[0] * m[i] + (1 - betas[0]) * g
            v[i] = betas[1] * v[i] + (1 - betas[1]) * g * g
            mhat, vhat = m[i] / (1 - betas[0] ** t), v[i] / (1 - betas[1] ** t)
            params[i] = params[i] - lr * mhat / (np.sqrt(vhat) + eps)
        steps.append({"grads": [g.tolist() for g in grads], "grad_norm": norm,
                      "params": [p.tolist() for p in params]})
    return steps


def main():
    mask = masks()
    rewards = np.zeros((B, T))
    for b in range(B):  # the outcome reward on the last action token, plus small shaping
        idx = np.nonzero(mask[b])[0]
        if len(idx):
            rewards[b, idx[-1]] = rng.choice([-1.0, 1.0, 2.0, 3.0])
            rewards[b, idx[0]] += 0.1
    values = rng.normal(0, 1, (B, T))
    logp = rng.normal(-2, 0.5, (B, T))
    old = logp + rng.normal(0, 0.25, (B, T))
    # Ratios exactly at and around the clip boundaries.
    old[0, 3] = logp[0, 3] - np.log(1.28)
    old[0, 4] = logp[0, 4] - np.log(0.8)
    old[0, 5] = logp[0, 5] - np.log(1.5)
    old[0, 6] = logp[0, 6] - np.log(0.5)
    old[4, 0] = logp[4, 0] - np.log(4.0)
    adv_tok = rng.normal(0, 1, (B, T))
    adv_tok[0, 5] = 1.0
    adv_tok[0, 6] = -1.0
    adv_tok[4, 0] = -2.0
    tokens, sequences = float(mask.sum()), float((mask.sum(1) > 0).sum())

    cases = {"B": B, "T": T, "mask": mask.astype(int).tolist(), "rewards": rewards.tolist(),
             "values": values.tolist(), "logprobs": logp.tolist(), "old_logprobs": old.tolist(),
             "advantages": adv_tok.tolist(), "tokens": tokens, "sequences": sequences}
    for gamma, lam in [(1.0, 0.95), (0.99, 1.0), (1.0, 1.0)]:
        a, r = gae(rewards, values, mask, gamma, lam)
        cases.setdefault("gae", []).append({"gamma": gamma, "lambda": lam, "advantages": a.tolist(),
                                            "returns": r.tolist()})
    scores = rng.choice([-1.0, 1.0, 2.0, 3.0], 12)
    scores[8:12] = 1.0  # a group without spread
    groups = np.repeat(np.arange(3), 4)
    cases["scores"] = scores.tolist()
    cases["groups"] = groups.tolist()
    cases["grpo_std"] = group_norm(scores, groups, True, 1e-6).tolist()
    cases["grpo_nostd"] = group_norm(scores, groups, False, 1e-6).tolist()
    cases["rloo"] = rloo(scores, groups).tolist()
    cases["spread"] = [bool(len(set(scores[groups == g])) > 1) for g in groups]
    for mode in ("token_mean", "seq_mean"):
        for dual in (0.0, 3.0):
            r = policy_loss(logp, old, adv_tok, mask, 0.2, 0.28, dual, mode, tokens, sequences)
            r.update({"mode": mode, "dual_clip": dual})
            cases.setdefault("policy", []).append(r)
        old_v = values + rng.normal(0, 0.3, (B, T))
        ret = values + rng.normal(0, 1, (B, T))
        loss, frac = value_loss(values, old_v, ret, mask, 0.2, mode, tokens, sequences)
        cases.setdefault("value", []).append({"mode": mode, "old_values": old_v.tolist(), "returns": ret.tolist(),
                                              "loss": loss, "clip_fraction": frac})
    logits = rng.normal(0, 2, (2, 3, 7))
    cases["entropy_logits"] = logits.tolist()
    cases["entropy"] = entropy(logits).tolist()
    ref = logp + rng.normal(0, 0.2, (B, T))
    cases["ref_logprobs"] = ref.tolist()
    cases["kl_k1"] = (logp - ref).tolist()
    cases["kl_k3"] = (np.exp(ref - logp) - (ref - logp) - 1).tolist()
    cases["overlong"] = [[L, 100, 20, overlong(L, 100, 20)] for L in (0, 80, 81, 90, 100, 101, 500)]
    ret = values + rng.normal(0, 0.5, (B, T))
    cases["ev_returns"] = ret.tolist()
    cases["explained_variance"] = explained_variance(values, ret, mask)
    start = [rng.normal(0, 1, (3, 4)), rng.normal(0, 1, (1, 5))]
    grads = [[rng.normal(0, s, (3, 4)), rng.normal(0, s, (1, 5))] for s in (1.0, 0.05, 2.0)]  # clip, not, clip
    cases["adamw"] = {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.1,
                      "max_grad_norm": 1.0, "start": [p.tolist() for p in start],
                      "steps": adamw_with_clipping([p.copy() for p in start], grads, 0.01, (0.9, 0.999), 1e-8, 0.1,
                                                   1.0)}
    with open(sys.argv[1], "w") as f:
        json.dump(cases, f, indent=None)
        f.write("\n")


if __name__ == "__main__":
    main()
