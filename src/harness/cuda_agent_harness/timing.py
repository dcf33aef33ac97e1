"""The timed loop shared by eager, torch.compile and the candidate, so all three
are measured identically: caches flushed, device synchronised, per-call timer."""
import random
import time

import torch

from .task import as_outputs

SAMPLES_PER_OUTPUT = 64
_perf_counter = time.perf_counter


def sample_positions(seed, numel, count=SAMPLES_PER_OUTPUT):
    rng = random.Random(seed)
    if numel <= 0:
        return []
    return [rng.randrange(numel) for _ in range(count)]


class Clock:
    def __init__(self, device, flush, flush_bytes):
        self.cuda = device.startswith("cuda")
        self.flush_buffer = None
        if flush:
            if flush_bytes <= 0:
                if self.cuda:
                    flush_bytes = 2 * torch.cuda.get_device_properties(device).L2_cache_size
                else:
                    flush_bytes = 64 << 20
            self.flush_buffer = torch.empty(flush_bytes // 4, dtype=torch.int32, device=device)
        self._Event = torch.cuda.Event if self.cuda else None
        self._sync = torch.cuda.synchronize if self.cuda else (lambda: None)

    def flush(self):
        if self.flush_buffer is not None:
            self.flush_buffer.add_(1)

    def time_call(self, fn, args):
        """(milliseconds, output) of one call, device-wide synchronised."""
        self.flush()
        self._sync()
        if self.cuda:
            start = self._Event(enable_timing=True)
            end = self._Event(enable_timing=True)
            start.record()
            out = fn(*args)
            self._sync()  # the whole device: work on other streams counts
            end.record()
            end.synchronize()
            return start.elapsed_time(end), out
        t0 = _perf_counter()
        out = fn(*args)
        t1 = _perf_counter()
        return (t1 - t0) * 1e3, out


def warmup(fn, trial_inputs, count, sync):
    for k in range(count):
        fn(*trial_inputs.warmup(k))
    sync()


def run_trials(fn, trial_inputs, trials, clock, positions, on_trial=None):
    """Times `trials` calls. Returns (times_ms, samples) where samples[j] is a
    (trials, len(positions[j])) float64 tensor of output j's values at the
    secret sample positions. `on_trial(k, args)` runs after call k, untimed."""
    times = []
    rows = None
    for k in range(trials):
        args = trial_inputs.trial(k)
        ms, out = clock.time_call(fn, args)
        times.append(ms)
        outs = as_outputs(out)
        if rows is None:
            rows = [[] for _ in outs]
        for j, o in enumerate(outs[: len(rows)]):
            flat = o.detach().reshape(-1)
            pos = positions[j] if j < len(positions) else []
            idx = torch.tensor([p % max(flat.numel(), 1) for p in pos], dtype=torch.long, device=flat.device)
            rows[j].append(flat[idx].to(torch.float64).cpu() if flat.numel() else torch.zeros(len(pos), dtype=torch.float64))
        if on_trial is not None:
            on_trial(k, args)
        del out, outs, args
    samples = [torch.stack(r) for r in (rows or [])]
    return times, samples
