#!/usr/bin/env python3
"""Tokenizer throughput: cuda-agent's encoder next to Hugging Face `tokenizers`
(single-threaded encode of one long text) on the tokenizer trained by
tests/tokenizer/make_fixtures.py and ~2 MB of Python sources.

  python3 scripts/bench/tokenizer_speed.py --build build
"""
import argparse
import json
import os
import subprocess
import sysconfig
import tempfile
import time

from tokenizers import Tokenizer


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--bytes", type=int, default=2_000_000)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="tokenize-bench-")
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run(["python3", os.path.join(here, "..", "..", "tests", "tokenizer", "make_fixtures.py"), work],
                   check=True, stdout=subprocess.DEVNULL)
    text, root = [], os.path.join(sysconfig.get_paths()["stdlib"], "test")
    size = 0
    for name in sorted(os.listdir(root)):
        if name.endswith(".py"):
            with open(os.path.join(root, name), encoding="utf-8", errors="replace") as f:
                text.append(f.read())
            size += len(text[-1].encode())
            if size >= args.bytes:
                break
    path = os.path.join(work, "text.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(text))
    data = open(path, encoding="utf-8").read()
    for style in ("qwen2", "gpt2"):
        d = os.path.join(work, style)
        ours = json.loads(subprocess.run([os.path.join(args.build, "tokenize_bench"), "--tokenizer", d, "--text", path],
                                         check=True, capture_output=True, text=True).stdout)
        hf = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        best = 1e30
        for _ in range(3):
            t = time.time()
            ids = hf.encode(data, add_special_tokens=False).ids
            best = min(best, time.time() - t)
        mb = len(data.encode()) / 1e6
        print("%s: %.2f MB, cuda-agent encode %.2f MB/s (%d tokens), tokenizers %.2f MB/s (%d tokens)"
              % (style, mb, ours["encode_mb_per_s"], ours["tokens"], mb / best, len(ids)))


if __name__ == "__main__":
    main()
