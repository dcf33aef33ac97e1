#!/usr/bin/env python3
"""Decode throughput of cuda-agent's generator next to transformers' generate on
the same random model and device, and next to the memory-bandwidth limit.

  python3 scripts/bench/generate.py --build build --device cuda --shape qwen2.5-0.5b --out gen.json
  python3 scripts/bench/generate.py --build build --device cpu --shape tiny --batches 1 4 --new-tokens 64

The limit per decode step is (weight bytes + KV-cache bytes read at the mean
context) / bandwidth (4.8 TB/s on an H200); tokens/s limit = batch / that.
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

import torch

SHAPES = {
    # Qwen2.5-0.5B: 24 layers, hidden 896, 14 heads (2 KV), head_dim 64, vocab 151936, tied embeddings.
    "qwen2.5-0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                         rope_theta=1000000.0, tie_word_embeddings=True),
    # Qwen2.5-1.5B: 28 layers, hidden 1536, 12 heads (2 KV), head_dim 128: 3x the bytes a step.
    "qwen2.5-1.5b": dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=32768,
                         rope_theta=1000000.0, tie_word_embeddings=True),
    "tiny": dict(vocab_size=4096, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                 tie_word_embeddings=True),
}


def make_model(shape, dtype, path):
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    config = Qwen2Config(**SHAPES[shape])
    model = Qwen2ForCausalLM(config).to(dtype)
    model.save_pretrained(path, safe_serialization=True)
    return model


def transformers_decode(model, device, batch, prompt_len, new_tokens):
    model = model.to(device).eval()
    ids = torch.randint(0, model.config.vocab_size, (batch, prompt_len), device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def run(n):
        sync()
        t = time.time()
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                       do_sample=False, pad_token_id=0)
        sync()
        return time.time() - t

    with torch.no_grad():
        run(4)  # warm-up
        prefill = run(1)
        total = run(new_tokens)
    return batch * (new_tokens - 1) / max(total - prefill, 1e-9)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shape", default="qwen2.5-0.5b", choices=sorted(SHAPES))
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=512)
    ap.add_argument("--bandwidth-tbs", type=float, default=4.8)
    ap.add_argument("--without-graphs", action="store_true", help="also time cuda-agent without CUDA graphs")
    ap.add_argument("--decode-kernels", nargs="*", default=[], choices=["fused", "persistent"],
                    help="also time cuda-agent with these decode kernels (up to 8 rows; larger batches use ATen)")
    ap.add_argument("--profile", action="store_true", help="add cuda-agent's GPU time per kernel over 64 steps")
    ap.add_argument("--overlap", action="store_true",
                    help="cuda-agent launches each decode step before reading the last one's tokens")
    ap.add_argument("--without-transformers", action="store_true",
                    help="time cuda-agent only (a sweep of its own options)")
    ap.add_argument("--out")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    work = tempfile.mkdtemp(prefix="generate-bench-")
    model = make_model(args.shape, dtype, work)
    ours_json = os.path.join(work, "ours.json")
    cmd = [os.path.join(args.build, "generate_bench"), "--model", work, "--device", args.device, "--dtype", args.dtype,
           "--prompt-len", str(args.prompt_len), "--new-tokens", str(args.new_tokens), "--json", ours_json]
    for b in args.batches:
        cmd += ["--batch", str(b)]
    if args.profile:
        cmd += ["--profile"]
    if args.overlap:
        cmd += ["--overlap"]
    subprocess.run(cmd, check=True)
    ours = {r["batch"]: r for r in json.load(open(ours_json))}
    eager = {}
    if args.without_graphs:  # the same without CUDA graphs: what they are worth
        subprocess.run(cmd + ["--cuda-graphs", "0"], check=True)
        eager = {r["batch"]: r for r in json.load(open(ours_json))}
    other = {}  # decode kernels -> batch -> row
    for kernels in args.decode_kernels:
        subprocess.run(cmd + ["--decode-kernels", kernels], check=True)
        other[kernels] = {r["batch"]: r for r in json.load(open(ours_json))}
    c = model.config
    elem = torch.finfo(dtype).bits // 8
    weight_bytes = sum(p.numel() for p in model.parameters()) * elem
    head_dim = c.hidden_size // c.num_attention_heads
    kv_per_token = c.num_hidden_layers * 2 * c.num_key_value_heads * head_dim * elem
    rows = []
    for b in args.batches:
        mean_ctx = args.prompt_len + args.new_tokens / 2
        step_bytes = weight_bytes + b * mean_ctx * kv_per_token
        limit = b / (step_bytes / (args.bandwidth_tbs * 1e12))
        theirs = None if args.without_transformers else transformers_decode(model, args.device, b, args.prompt_len,
                                                                             args.new_tokens)
        row = {"batch": b, "cuda_agent_tokens_per_s": ours[b]["decode_tokens_per_s"],
               "transformers_tokens_per_s": theirs, "bandwidth_limit_tokens_per_s": limit,
               "speedup_vs_transformers": ours[b]["decode_tokens_per_s"] / theirs if theirs else None,
               "fraction_of_limit": ours[b]["decode_tokens_per_s"] / limit,
               "cuda_agent_without_graphs_tokens_per_s": eager.get(b, {}).get("decode_tokens_per_s")}
        for kernels, rows_of in other.items():
            mine = rows_of[b]
            row["cuda_agent_%s_tokens_per_s" % kernels] = mine["decode_tokens_per_s"]
            row["%s_fraction_of_limit" % kernels] = mine["decode_tokens_per_s"] / limit
            if "profile_64_steps" in mine:
                row["cuda_agent_%s_profile_64_steps" % kernels] = mine["profile_64_steps"]
        if "profile_64_steps" in ours[b]:
            row["cuda_agent_profile_64_steps"] = ours[b]["profile_64_steps"]
        rows.append(row)
        versus = " transformers %9.1f tok/s (%.2fx)," % (theirs, row["speedup_vs_transformers"]) if theirs else ""
        print("batch %3d: cuda-agent %9.1f tok/s,%s limit %9.1f tok/s (%.1f%%)"
              % (b, row["cuda_agent_tokens_per_s"], versus, limit, 100 * row["fraction_of_limit"]), flush=True)
        for kernels in other:
            print("           %-10s %9.1f tok/s (%.1f%% of the limit)"
                  % (kernels, row["cuda_agent_%s_tokens_per_s" % kernels], 100 * row["%s_fraction_of_limit" % kernels]),
                  flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"shape": args.shape, "device": args.device, "dtype": args.dtype, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
