#!/usr/bin/env python3
"""Per-phase latency of the judge (lint, reference, compile, verify, profile).

Runs `cuda-agent check --json` on each TASK:CANDIDATE pair, first with an empty
cache directory (cold: precompiled header and torch.compile baselines built),
then again with the same cache (warm), and prints the mean seconds per phase.

  python3 scripts/bench/judge_latency.py --backend cpu --repeat 2 \
      data/examples/tasks/relu.py:data/examples/cpu/relu_kernelbench.py ...
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

PHASES = ["lint", "reference", "compile", "verify", "profile_baselines", "profile_candidate", "total"]


def run_check(binary, backend, task, candidate, cache_dir, extra):
    cmd = [binary, "check", "--json", "--backend", backend, "--task", task, "--candidate", candidate,
           "--set", "judge.cache_dir=" + cache_dir] + sum((["--set", s] for s in extra), [])
    start = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - start
    if proc.returncode != 0:
        sys.exit("check failed (%d): %s\n%s" % (proc.returncode, " ".join(cmd), proc.stderr[-3000:]))
    verdict = json.loads(proc.stdout)
    return verdict, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="+", help="TASK:CANDIDATE pairs")
    ap.add_argument("--binary", default="build/src/cuda-agent")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--repeat", type=int, default=2, help="warm runs per case")
    ap.add_argument("--set", action="append", default=[], help="extra config overrides")
    ap.add_argument("--out", help="write all verdict timings here as JSON")
    args = ap.parse_args()

    cache_dir = tempfile.mkdtemp(prefix="judge-bench-cache-")
    rows = {"cold": [], "warm": []}
    for case in args.cases:
        task, candidate = case.split(":", 1)
        for i in range(1 + args.repeat):
            kind = "cold" if i == 0 else "warm"
            verdict, wall = run_check(args.binary, args.backend, task, candidate, cache_dir, args.set)
            phases = dict(verdict["phase_seconds"])
            phases["wall"] = wall
            rows[kind].append({"case": case, "outcome": verdict["outcome"], "phases": phases,
                               "reward": verdict["reward"]})
            print("%-5s %-60s %-14s %s" % (kind, os.path.basename(candidate.rstrip("/")), verdict["outcome"],
                                          " ".join("%s=%.2f" % (k, phases.get(k, 0)) for k in PHASES)),
                  flush=True)
    print("\nmean seconds per phase (cold = first run of each case, fresh cache for the first case only)")
    print("%-6s %s" % ("", " ".join("%18s" % p for p in PHASES + ["wall"])))
    for kind in ("cold", "warm"):
        if rows[kind]:
            means = [statistics.mean(r["phases"].get(p, 0.0) for r in rows[kind]) for p in PHASES + ["wall"]]
            print("%-6s %s" % (kind, " ".join("%18.2f" % m for m in means)))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
