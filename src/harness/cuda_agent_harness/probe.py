"""Device health probe: can the device still allocate, compute and free, and how
much of its memory is free? The worker quarantines a device that fails it."""
import time

import torch


def _cpu_free_mb():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    return 0


def probe(spec):
    start = time.time()
    try:
        if spec["backend"] == "cuda":
            free, total = torch.cuda.mem_get_info()
            a = torch.randn(512, 512, device="cuda")
            b = (a @ a.t()).sum().item()  # runs a kernel and reads the result back
            del a
            torch.cuda.synchronize()
            free_mb, total_mb = free >> 20, total >> 20
        else:
            a = torch.randn(256, 256)
            b = (a @ a.t()).sum().item()
            free_mb, total_mb = _cpu_free_mb(), 0
        if b != b:
            return {"ok": False, "message": "a small matmul returned NaN"}
        return {"ok": True, "free_mb": free_mb, "total_mb": total_mb, "seconds": time.time() - start}
    except Exception as e:  # the answer is the failure itself
        return {"ok": False, "message": "%s: %s" % (type(e).__name__, e)}
