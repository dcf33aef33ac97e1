"""What the reference and candidate processes share: device set-up, saving
outputs, and the command loop that drives warm-up, timing and the post-timing
checks on the judge's orders."""
import os
import traceback

import torch

from . import tensor_io, timing
from .task import TrialInputs, as_outputs, post_plan


def setup(spec):
    torch.set_num_threads(int(spec["cpu_threads"]))
    torch.backends.cuda.matmul.allow_tf32 = bool(spec["tf32"])
    torch.backends.cudnn.allow_tf32 = bool(spec["tf32"])
    device = "cuda:0" if spec["backend"] == "cuda" else "cpu"
    if device.startswith("cuda"):
        torch.cuda.set_device(0)
    return device


def environment(device):
    env = {"torch": torch.__version__, "cuda": torch.version.cuda or "", "device": device,
           "tf32": bool(torch.backends.cuda.matmul.allow_tf32)}
    if device.startswith("cuda"):
        env["device_name"] = torch.cuda.get_device_name(0)
        env["cuda_capability"] = "%d.%d" % torch.cuda.get_device_capability(0)
    else:
        env["device_name"] = "cpu"
    return env


def sync_fn(device):
    return torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)


def save_outputs(out_dir, tag, outs, opener=open):
    meta = []
    for j, o in enumerate(outs):
        tensor_io.save(os.path.join(out_dir, "%s.%d.t" % (tag, j)), o, opener)
        meta.append({"dtype": tensor_io.dtype_name(o.dtype), "shape": list(o.shape)})
    return meta


def error_message(exc):
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text[-8000:]


class CommandLoop:
    """Serves the judge's commands after the checks:
      {"cmd": "prepare", "impl": NAME}   builds NAME's callable and calls it once (torch.compile
                                         compiles here, before the judge holds the timing slot)
      {"cmd": "warmup", "impl": NAME, "timing_seed": S, "warmup": W, "trials": N, "pool": P}
      {"cmd": "time", "impl": NAME}
      {"cmd": "post", "post_seed": S}
      {"cmd": "quit"}
    `impls` maps NAME to a zero-argument factory returning the callable to time.
    `run_post(fn, tag, inputs)` runs one post-timing check and returns its message fields.
    `on_trial(k, args)` runs after timed call k (untimed), with `self.timing_seed` set.
    """

    def __init__(self, channel, task, spec, device, impls, run_post, out_dir, on_trial=None):
        self.channel = channel
        self.task = task
        self.spec = spec
        self.device = device
        self.impls = impls
        self.run_post = run_post
        self.out_dir = out_dir
        self.on_trial = on_trial
        self.clock = timing.Clock(device, spec["flush_cache"], spec["flush_bytes"])
        self.fns = {}
        self.trial_inputs = None

    def serve(self):
        while True:
            cmd = self.channel.receive()
            kind = cmd.get("cmd")
            if kind == "quit":
                return 0
            try:
                if kind == "prepare":
                    self._prepare(cmd)
                elif kind == "warmup":
                    self._warmup(cmd)
                elif kind == "time":
                    self._time(cmd)
                elif kind == "post":
                    self._post(cmd)
                else:
                    self.channel.send(event="error", kind="protocol", message="unknown command %r" % kind)
            except Exception as e:  # noqa: BLE001 - reported to the judge as a runtime error
                self.channel.send(event="error", kind=kind, message=error_message(e))

    def _warmup(self, cmd):
        impl = cmd["impl"]
        if self.trial_inputs is None:
            self.timing_seed = cmd["timing_seed"]
            self.trials = cmd["trials"]
            self.trial_inputs = TrialInputs(self.task, self.timing_seed, cmd["pool"], self.trials)
        if impl not in self.fns:  # prepared earlier, or built now
            self.fns[impl] = self.impls[impl]()
        fn = self.fns[impl]
        timing.warmup(fn, self.trial_inputs, cmd["warmup"], sync_fn(self.device))
        self.channel.send(event="warm", impl=impl)

    def _prepare(self, cmd):
        impl = cmd["impl"]
        fn = self.impls[impl]()
        fn(*self.task.inputs(self.spec["seed"] + 1))
        sync_fn(self.device)()
        self.fns[impl] = fn
        self.channel.send(event="prepared", impl=impl)

    def _time(self, cmd):
        impl = cmd["impl"]
        fn = self.fns[impl]
        probe = as_outputs(fn(*self.trial_inputs.warmup(0)))
        positions = [timing.sample_positions(self.timing_seed * 7919 + j, o.numel()) for j, o in enumerate(probe)]
        del probe
        sync_fn(self.device)()
        times, samples = timing.run_trials(fn, self.trial_inputs, self.trials, self.clock, positions, self.on_trial)
        for j, s in enumerate(samples):
            tensor_io.save(os.path.join(self.out_dir, "samples_%s.%d.t" % (impl, j)), s)
        self.channel.send(event="timed", impl=impl, times_ms=times, outputs=len(samples))

    def _post(self, cmd):
        results = []
        for tag, seed, _ in post_plan(cmd["post_seed"]):
            inputs = self.task.inputs(seed)
            results.append(self.run_post(tag, inputs))
        self.channel.send(event="post", checks=results)
