#!/usr/bin/env python3
"""Logit parity of cuda-agent's model with transformers on a random model of a
given shape, in a given dtype and device: the max and mean absolute difference
of the logits, and how often the argmax agrees.

  python3 scripts/bench/bf16_parity.py --build build --device cuda --dtype bfloat16 --shape qwen2.5-0.5b
  python3 scripts/bench/bf16_parity.py --build build --device cpu --dtype bfloat16 --shape tiny
"""
import argparse
import json
import os
import subprocess
import tempfile

import torch
from safetensors.torch import load_file

from generate import SHAPES  # the same shapes as the decode benchmark


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--shape", default="qwen2.5-0.5b", choices=sorted(SHAPES))
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--out")
    args = ap.parse_args()
    from transformers import Qwen2Config, Qwen2ForCausalLM
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(**SHAPES[args.shape])).to(dtype).to(args.device).eval()
    work = tempfile.mkdtemp(prefix="parity-")
    model.save_pretrained(work, safe_serialization=True)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, model.config.vocab_size, (n,), generator=g).tolist()
               for n in (args.prompt_len, args.prompt_len // 4, 7)]
    with open(os.path.join(work, "prompts.json"), "w") as f:
        json.dump(prompts, f)
    ours_path = os.path.join(work, "ours.safetensors")
    subprocess.run([os.path.join(args.build, "model_logits"), "--model", work, "--prompts",
                    os.path.join(work, "prompts.json"), "--out", ours_path, "--device", args.device,
                    "--dtype", args.dtype], check=True)
    ours = load_file(ours_path)
    worst, mean_sum, count, agree, total = 0.0, 0.0, 0, 0, 0
    with torch.no_grad():
        for i, p in enumerate(prompts):
            theirs = model(torch.tensor([p], device=args.device)).logits[0].float().cpu()
            diff = (ours["logits_%d" % i] - theirs).abs()
            worst = max(worst, diff.max().item())
            mean_sum += diff.sum().item()
            count += diff.numel()
            agree += (ours["logits_%d" % i].argmax(-1) == theirs.argmax(-1)).sum().item()
            total += theirs.shape[0]
    row = {"shape": args.shape, "device": args.device, "dtype": args.dtype, "max_abs_diff": worst,
           "mean_abs_diff": mean_sum / count, "argmax_agreement": agree / total}
    print(json.dumps(row))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(row, f, indent=1)


if __name__ == "__main__":
    main()
