"""Run-time checks inside the candidate's process.

Everything here can in principle be reached by candidate code running in the
same process; the lint pass forbids the ways to reach it (introspection,
monkeypatching, private torch modules), and the C++ judge cross-checks what
matters (outputs, timings) from outside. These checks catch what static rules
cannot see: PyTorch compute dispatched from Python or from the candidate's C++,
outputs that alias inputs, in-place changes to inputs, replaced functions.
"""
import builtins
import json
import os
import sys
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def op_name(func):
    schema = func._schema
    return schema.name if func._overloadname == "default" else "%s.%s" % (schema.name, func._overloadname)


class OpRecorder(TorchDispatchMode):
    """Records every ATen op dispatched while active, from Python or C++."""

    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(op_name(func))
        return func(*args, **(kwargs or {}))


def _critical_objects():
    objs = {
        "builtins.open": builtins.open, "builtins.__import__": builtins.__import__, "json.dumps": json.dumps,
        "os.write": os.write, "os._exit": os._exit, "time.perf_counter": time.perf_counter,
        "torch.cuda.Event": torch.cuda.Event, "torch.cuda.synchronize": torch.cuda.synchronize,
        "torch.equal": torch.equal, "torch.Tensor": torch.Tensor, "torch.nn.Module.__call__": torch.nn.Module.__call__,
        "torch.nn.Module._call_impl": torch.nn.Module._call_impl, "TorchDispatchMode": TorchDispatchMode,
    }
    for name, value in vars(torch.Tensor).items():
        objs["torch.Tensor." + name] = value
    for modname, module in list(sys.modules.items()):
        if modname.startswith("cuda_agent_harness"):
            for name, value in vars(module).items():
                if callable(value):
                    objs[modname + "." + name] = value
                    code = getattr(value, "__code__", None)
                    if code is not None:
                        objs[modname + "." + name + ".__code__"] = code
    return objs


class Integrity:
    """A snapshot of functions the harness relies on; Changed() lists replaced ones."""

    def __init__(self):
        self.snapshot = {k: id(v) for k, v in _critical_objects().items()}

    def changed(self):
        now = {k: id(v) for k, v in _critical_objects().items()}
        return sorted(k for k, v in self.snapshot.items() if now.get(k) != v)


def thread_count():
    return len(os.listdir("/proc/self/task"))


def _storage_span(t):
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def output_problems(outs, ref_meta, inputs, device):
    """Problems with the candidate's outputs that make them wrong no matter their values."""
    problems = []
    if len(outs) != len(ref_meta):
        return ["returned %d outputs, the reference returns %d" % (len(outs), len(ref_meta))]
    spans = [_storage_span(x) for x in inputs if isinstance(x, torch.Tensor) and x.numel()]
    for j, (o, meta) in enumerate(zip(outs, ref_meta)):
        if type(o) is not torch.Tensor:
            problems.append("output %d is a %s, not a plain torch.Tensor" % (j, type(o).__name__))
            continue
        if str(o.device) != str(torch.device(device)) and not (device.startswith("cuda") and o.is_cuda):
            problems.append("output %d is on %s, expected %s" % (j, o.device, device))
        if o.numel():
            lo, hi = _storage_span(o)
            if any(lo < b and a < hi for a, b in spans):
                problems.append("output %d shares memory with an input" % j)
    return problems
