"""Reference mode: the task's Model on pristine inputs, and the eager and
torch.compile baselines. Candidate code never runs in this process."""
import os

import torch
import torch._inductor.config as inductor_config

from . import session
from .task import Task, TaskError, as_outputs, check_plan, clone_values, scale_inputs


def _same(a, b):
    return all(not isinstance(x, torch.Tensor) or torch.equal(x, y) for x, y in zip(a, b))


def _count_flops(model, inputs):
    try:
        from torch.utils.flop_counter import FlopCounterMode
        with FlopCounterMode(display=False) as counter:
            model(*inputs)
        return int(counter.get_total_flops())
    except Exception:  # noqa: BLE001 - flops are optional
        return 0


def _bytes(values):
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def run(spec, channel):
    out_dir = spec["out_dir"]
    try:
        device = session.setup(spec)
        task = Task(spec["task_path"], device)
        model = task.make_model(task.Model, spec["seed"])
    except TaskError as e:
        channel.send(event="error", kind="task", message=str(e))
        return 0
    except Exception as e:  # noqa: BLE001
        channel.send(event="error", kind="task", message=session.error_message(e))
        return 0

    checks = []
    mutates = False
    first_outputs = {}
    try:
        with torch.no_grad():
            for tag, seed, factor in check_plan(spec):
                inputs = scale_inputs(task.inputs(seed), factor)
                pristine = clone_values(inputs)
                outs = as_outputs(model(*inputs))
                mutates |= not _same(inputs, pristine)
                checks.append({"tag": tag, "outputs": session.save_outputs(out_dir, tag, outs)})
                if tag in ("check_0", "check_1"):
                    first_outputs[tag] = [o.detach().clone() for o in outs]
            probe = task.inputs(spec["seed"] + 1)
            flops = _count_flops(model, probe)
            probe_out = as_outputs(model(*probe))
            io_bytes = _bytes(probe) + _bytes(probe_out)
    except Exception as e:  # noqa: BLE001
        channel.send(event="error", kind="task", message="reference model failed: " + session.error_message(e))
        return 0
    degenerate = False
    if "check_0" in first_outputs and "check_1" in first_outputs:
        degenerate = all(torch.equal(a, b) for a, b in zip(first_outputs["check_0"], first_outputs["check_1"]))
    channel.send(event="ready", checks=checks, mutates_inputs=mutates, degenerate=degenerate, flops=flops,
                 io_bytes=io_bytes, env=session.environment(device))

    def eager():
        return model

    def compiled():
        # Inductor precompiles its C++ prefix header under the temp directory,
        # which is private to each evaluation: every CPU compile would rebuild a
        # header of hundreds of MB (and fill the disk with concurrent ones) to
        # save less time than building it costs.
        inductor_config.cpp_cache_precompile_headers = False
        return torch.compile(model)

    def run_post(tag, inputs):
        with torch.no_grad():
            outs = as_outputs(model(*clone_values(inputs)))
        return {"tag": tag, "outputs": session.save_outputs(out_dir, tag, outs)}

    with torch.no_grad():
        return session.CommandLoop(channel, task, spec, device, {"eager": eager, "compile": compiled},
                                   run_post, out_dir).serve()
