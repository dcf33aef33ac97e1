"""Loading a KernelBench-style task and making its seeded inputs."""
import importlib.util
import random
import sys

import torch


class TaskError(Exception):
    """The task file itself is unusable (not the candidate's fault)."""


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TaskError("cannot load %s as a Python module" % path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def to_device(values, device):
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def clone_values(values):
    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]


def as_outputs(out):
    """A forward's result as a list of tensors, or raises TypeError."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.Tensor) for o in out):
        return list(out)
    raise TypeError("forward returned %s; expected a tensor or a tuple of tensors" % type(out).__name__)


class Task:
    def __init__(self, path, device):
        try:
            self.module = load_module(path, "cuda_agent_task")
        except TaskError:
            raise
        except Exception as e:  # the task file failed to import
            raise TaskError("task %s failed to import: %s: %s" % (path, type(e).__name__, e)) from e
        for name in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(self.module, name):
                raise TaskError("task %s defines no %s" % (path, name))
        if not isinstance(self.module.Model, type) or not issubclass(self.module.Model, torch.nn.Module):
            raise TaskError("task %s: Model is not a torch.nn.Module subclass" % path)
        self.path = path
        self.device = device
        self.Model = self.module.Model

    def init_inputs(self, seed):
        torch.manual_seed(seed)
        random.seed(seed)
        values = self.module.get_init_inputs()
        if not isinstance(values, (list, tuple)):
            raise TaskError("get_init_inputs() returned %s, not a list" % type(values).__name__)
        return list(values)

    def make_model(self, cls, seed):
        """Constructs cls(*init_inputs) with the weights of seed `seed`."""
        init = self.init_inputs(seed)
        torch.manual_seed(seed)
        random.seed(seed)
        return cls(*init).to(self.device)

    def inputs(self, seed):
        torch.manual_seed(seed)
        random.seed(seed)
        values = self.module.get_inputs()
        if not isinstance(values, (list, tuple)):
            raise TaskError("get_inputs() returned %s, not a list" % type(values).__name__)
        return to_device(list(values), self.device)


def scale_inputs(values, factor):
    """Float tensors times `factor`; everything else (indices, sizes) unchanged."""
    return [v * factor if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in values]


VARIANTS = (("variant_x3", 3.0), ("variant_x0.01", 0.01), ("variant_neg", -1.0))


def check_plan(spec):
    """[(tag, seed, scale)] of the correctness checks, in order."""
    seed = spec["seed"]
    plan = [("check_%d" % i, seed + 1 + i, 1.0) for i in range(spec["num_checks"])]
    if spec["hidden_variants"]:
        plan += [(tag, seed + 100, factor) for tag, factor in VARIANTS]
    return plan


def post_plan(post_seed, count=2):
    return [("post_%d" % i, post_seed + i, 1.0) for i in range(count)]


class TrialInputs:
    """Inputs of warm-up and timed calls: a pool of distinct random input sets,
    each call scaled by its own factor so no two timed calls see equal inputs.

    Every call gets the same few tensors (one per pool slot), refilled in place
    before the call: a cache keyed by address or tensor identity always hits
    and so always returns a stale output, which the sampled positions catch."""

    def __init__(self, task, timing_seed, pool_size, trials):
        self.pool = [task.inputs(timing_seed + 1000 + i) for i in range(pool_size)]
        self.buffers = [[v.clone() if isinstance(v, torch.Tensor) else v for v in values] for values in self.pool]
        rng = random.Random(timing_seed)
        self.scales = [0.5 + 1.5 * rng.random() for _ in range(trials)]

    def _fill(self, slot, factor):
        buffers = self.buffers[slot]
        for buffer, value in zip(buffers, scale_inputs(self.pool[slot], factor)):
            if isinstance(buffer, torch.Tensor):
                buffer.copy_(value)
        return buffers

    def warmup(self, k):
        return self._fill(k % len(self.pool), 1.0)

    def trial(self, k):
        return self._fill(k % len(self.pool), self.scales[k])
