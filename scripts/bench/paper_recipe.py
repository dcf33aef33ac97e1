#!/usr/bin/env python3
"""The judging recipe released with the CUDA Agent paper, re-implemented as the
baseline for scripts/bench/worker_throughput: per candidate, one at a time,
  1. a fresh torch.utils.cpp_extension build (new extensions dir, real load_inline),
  2. 5 correctness checks on random inputs (atol = rtol = 1e-2),
  3. torch.profiler timing of candidate, eager and torch.compile: 5 warm-up + 10 timed calls.
No sandbox and no anti-cheating: it is only the yardstick for throughput.

  python3 scripts/bench/paper_recipe.py --device cpu TASK:CANDIDATE [...] [--out recipe.json]
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time

import torch


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def profile(fn, inputs, device):
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    for _ in range(5):
        fn(*inputs)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(10):
            fn(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
    return sum(e.self_device_time_total if device == "cuda" else e.self_cpu_time_total
               for e in prof.key_averages()) / 10.0


def judge(task_path, cand_path, device, index):
    phases = {}
    start = time.time()
    os.environ["TORCH_EXTENSIONS_DIR"] = tempfile.mkdtemp(prefix="recipe-ext-")  # fresh build every time
    task = load(task_path, "recipe_task_%d" % index)
    cand = load(cand_path, "recipe_cand_%d" % index)
    phases["compile"] = time.time() - start
    t = time.time()
    init = task.get_init_inputs()
    torch.manual_seed(0)
    ref = task.Model(*init).to(device)
    torch.manual_seed(0)
    new = cand.ModelNew(*init).to(device)
    correct = True
    with torch.no_grad():
        for trial in range(5):
            torch.manual_seed(trial)
            inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
            correct &= torch.allclose(ref(*inputs), new(*inputs), atol=1e-2, rtol=1e-2)
        phases["verify"] = time.time() - t
        t = time.time()
        times = {"candidate": profile(new, inputs, device), "eager": profile(ref, inputs, device),
                 "compile": profile(torch.compile(ref), inputs, device)}
    phases["profile"] = time.time() - t
    phases["total"] = time.time() - start
    return {"case": task_path + ":" + cand_path, "correct": bool(correct), "phases": phases, "times_us": times}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="+")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out")
    args = ap.parse_args()
    rows = []
    for i, case in enumerate(args.cases):
        task, cand = case.split(":", 1)
        row = judge(task, cand, args.device, i)
        rows.append(row)
        print("%-50s correct=%s %s" % (os.path.basename(cand), row["correct"],
                                      " ".join("%s=%.2f" % kv for kv in row["phases"].items())), flush=True)
    totals = [r["phases"]["total"] for r in rows]
    print("paper recipe: %d candidates, mean %.2f s each, %.2f candidates/min"
          % (len(rows), statistics.mean(totals), 60.0 * len(rows) / sum(totals)))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
