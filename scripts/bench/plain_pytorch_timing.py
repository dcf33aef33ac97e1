#!/usr/bin/env python3
"""Times a task's eager and torch.compile forward with plain PyTorch (no judge,
no sandbox), to cross-check the judge's baseline timings on the same GPU:

  python3 scripts/bench/plain_pytorch_timing.py data/examples/tasks/relu_large.py --trials 100

CUDA events around each call, L2 flushed between calls, medians reported.
"""
import argparse
import importlib.util
import statistics

import torch


def load(path):
    spec = importlib.util.spec_from_file_location("task", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def time_fn(fn, inputs, trials, warmup, flush):
    for _ in range(warmup):
        fn(*inputs)
    torch.cuda.synchronize()
    times = []
    for _ in range(trials):
        flush.add_(1)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*inputs)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), min(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("task")
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args()
    task = load(args.task)
    torch.manual_seed(0)
    model = task.Model(*task.get_init_inputs()).cuda()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size // 4, dtype=torch.int32, device="cuda")
    with torch.no_grad():
        eager = time_fn(model, inputs, args.trials, args.warmup, flush)
        compiled = time_fn(torch.compile(model), inputs, args.trials, args.warmup, flush)
    print("plain PyTorch on %s: eager median %.4f ms (min %.4f), torch.compile median %.4f ms (min %.4f)"
          % (torch.cuda.get_device_name(0), eager[0], eager[1], compiled[0], compiled[1]))


if __name__ == "__main__":
    main()
