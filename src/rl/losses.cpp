#include "cuda_agent/rl/losses.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

namespace cuda_agent::rl {

LossScale ScaleOf(const at::Tensor& mask) {
  at::Tensor m = mask.to(at::kBool);
  return {static_cast<double>(m.sum().item<int64_t>()), static_cast<double>(m.any(1).sum().item<int64_t>())};
}

at::Tensor Aggregate(const at::Tensor& per_token, const at::Tensor& mask, LossAggregation mode,
                     const LossScale& scale) {
  at::Tensor m = mask.to(per_token.scalar_type());
  at::Tensor masked = per_token * m;
  if (mode == LossAggregation::kTokenMean) return masked.sum() / std::max(scale.tokens, 1.0);
  at::Tensor counts = m.sum(1);
  at::Tensor per_sequence = masked.sum(1) / counts.clamp_min(1);
  return per_sequence.sum() / std::max(scale.sequences, 1.0);
}

namespace {

double MaskedShare(const at::Tensor& condition, const at::Tensor& mask, double count) {
  return condition.logical_and(mask).sum().item<double>() / std::max(count, 1.0);
}

}  // namespace

at::Tensor PolicyLoss(const at::Tensor& logprobs, const at::Tensor& old_logprobs, const at::Tensor& advantages,
                      const at::Tensor& mask, const PolicyLossConfig& config, const LossScale& scale,
                      PolicyLossStats* stats) {
  at::Tensor logp = logprobs.to(at::kFloat);
  at::Tensor old = old_logprobs.detach().to(at::kFloat);
  at::Tensor adv = advantages.detach().to(at::kFloat);
  at::Tensor m = mask.to(at::kBool);
  at::Tensor log_ratio = logp - old;
  at::Tensor ratio = at::exp(log_ratio);
  at::Tensor surrogate = ratio * adv;
  at::Tensor clipped = at::clamp(ratio, 1.0 - config.clip_low, 1.0 + config.clip_high) * adv;
  at::Tensor loss = -at::minimum(surrogate, clipped);
  at::Tensor dual_hit;
  if (config.dual_clip > 0) {
    at::Tensor capped = at::minimum(loss, -config.dual_clip * adv);
    at::Tensor negative = adv < 0;
    dual_hit = negative.logical_and(capped < loss);
    loss = at::where(negative, capped, loss);
  }
  if (stats != nullptr) {
    c10::NoGradGuard no_grad;
    double n = m.sum().item<double>();
    at::Tensor r = ratio.detach();
    stats->clip_fraction_low = MaskedShare((r < 1.0 - config.clip_low).logical_and(adv < 0), m, n);
    stats->clip_fraction_high = MaskedShare((r > 1.0 + config.clip_high).logical_and(adv > 0), m, n);
    stats->dual_clip_fraction = dual_hit.defined() ? MaskedShare(dual_hit, m, n) : 0.0;
    stats->approx_kl = (0.5 * log_ratio.detach().pow(2) * m).sum().item<double>() / std::max(n, 1.0);
    stats->ratio_mean = (r * m).sum().item<double>() / std::max(n, 1.0);
    if (n > 0) {
      at::Tensor selected = r.masked_select(m);
      stats->ratio_max = selected.max().item<double>();
      stats->ratio_min = selected.min().item<double>();
    }
  }
  return Aggregate(loss, m, config.aggregation, scale);
}

at::Tensor ValueLoss(const at::Tensor& values, const at::Tensor& old_values, const at::Tensor& returns,
                     const at::Tensor& mask, double clip_eps, LossAggregation mode, const LossScale& scale,
                     double* clip_fraction) {
  at::Tensor v = values.to(at::kFloat);
  at::Tensor old = old_values.detach().to(at::kFloat);
  at::Tensor ret = returns.detach().to(at::kFloat);
  at::Tensor clipped = old + at::clamp(v - old, -clip_eps, clip_eps);
  at::Tensor plain_err = (v - ret).pow(2), clipped_err = (clipped - ret).pow(2);
  at::Tensor loss = 0.5 * at::maximum(plain_err, clipped_err);
  at::Tensor m = mask.to(at::kBool);
  if (clip_fraction != nullptr)
    *clip_fraction = MaskedShare((clipped_err > plain_err).detach(), m, m.sum().item<double>());
  return Aggregate(loss, m, mode, scale);
}

model::TokenLogprobs TokenLogprobsAndEntropy(const at::Tensor& logits, const at::Tensor& tokens) {
  const int64_t B = tokens.size(0), T = tokens.size(1);
  auto out = model::ComputeTokenLogprobs(logits.reshape({B * T, logits.size(-1)}), tokens.reshape({B * T}));
  return {out.logprobs.view({B, T}), out.entropy.view({B, T})};
}

at::Tensor KlPenalty(const at::Tensor& logprobs, const at::Tensor& ref_logprobs, KlEstimator estimator) {
  at::Tensor d = ref_logprobs.to(at::kFloat) - logprobs.to(at::kFloat);
  if (estimator == KlEstimator::kK1) return -d;
  return at::exp(d) - d - 1;
}

double ExplainedVariance(const at::Tensor& values, const at::Tensor& returns, const at::Tensor& mask) {
  at::Tensor m = mask.to(at::kBool);
  at::Tensor r = returns.detach().to(at::kDouble).masked_select(m);
  at::Tensor d = r - values.detach().to(at::kDouble).masked_select(m);
  if (r.numel() < 2) return 0.0;
  double var_r = r.var().item<double>();
  return var_r > 0 ? 1.0 - d.var().item<double>() / var_r : 0.0;
}

}  // namespace cuda_agent::rl
