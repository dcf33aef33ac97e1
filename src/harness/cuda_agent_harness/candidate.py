"""Candidate mode: load ModelNew with the reference's weights, run the checks
(outputs go to files the C++ judge compares), then timing on command."""
import importlib.util
import os
import random
import sys

import torch

from . import build, guard, session, tensor_io, timing  # noqa: F401 - all loaded before the snapshot
from .task import Task, TaskError, as_outputs, check_plan, clone_values, scale_inputs

# The integrity snapshot covers every harness module and is taken before any
# candidate code is imported.
_integrity = guard.Integrity()


def _import_candidate(spec):
    kind = spec["candidate_kind"]
    if kind == "workspace":
        sys.path.insert(0, spec["build_dir"])
    build.install_load_inline(spec, allow_build=False)
    path = spec["candidate_module"]
    mod_spec = importlib.util.spec_from_file_location("model_new", path)
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules["model_new"] = module
    mod_spec.loader.exec_module(module)
    if not hasattr(module, "ModelNew"):
        raise RuntimeError("%s defines no class ModelNew" % os.path.basename(path))
    return module.ModelNew


def _state_dict_problem(model, state):
    own = model.state_dict()
    missing = sorted(set(state) - set(own))
    unexpected = sorted(set(own) - set(state))
    shapes = sorted("%s: %s vs %s" % (k, tuple(own[k].shape), tuple(state[k].shape))
                    for k in set(own) & set(state) if own[k].shape != state[k].shape)
    if not (missing or unexpected or shapes):
        return None
    parts = []
    if missing:
        parts.append("missing parameters/buffers: " + ", ".join(missing[:20]))
    if unexpected:
        parts.append("unexpected parameters/buffers: " + ", ".join(unexpected[:20]))
    if shapes:
        parts.append("shape mismatches (candidate vs reference): " + "; ".join(shapes[:20]))
    return "ModelNew's state dict does not match Model's: " + " | ".join(parts)


def run(spec, channel):
    out_dir = spec["out_dir"]
    try:
        device = session.setup(spec)
        task = Task(spec["task_path"], device)
        state = task.make_model(task.Model, spec["seed"]).state_dict()
        init = task.init_inputs(spec["seed"])
    except TaskError as e:
        channel.send(event="error", kind="task", message=str(e))
        return 0
    try:
        ModelNew = _import_candidate(spec)
        torch.manual_seed(spec["seed"])
        model = ModelNew(*init).to(device)
    except build.BuildError as e:
        channel.send(event="error", kind="compile", message=str(e)[-8000:])
        return 0
    except Exception as e:  # noqa: BLE001 - the candidate's fault: a runtime error
        channel.send(event="error", kind="load", message=session.error_message(e))
        return 0
    problem = _state_dict_problem(model, state)
    if problem is not None:
        channel.send(event="error", kind="state_dict", message=problem)
        return 0
    model.load_state_dict(state, strict=True)
    del state

    ref_checks = {c["tag"]: c["outputs"] for c in spec["reference_checks"]}
    allowed = set(spec["allowed_torch_ops"])
    forbidden_ops = set()
    sync = session.sync_fn(device)

    def guarded_call(tag, inputs):
        """One checked call: op recording, aliasing and in-place checks, outputs saved."""
        pristine = clone_values(inputs)
        recorder = guard.OpRecorder()
        with torch.no_grad(), recorder:
            out = model(*inputs)
            sync()
        forbidden_ops.update(op for op in recorder.ops if op not in allowed)
        outs = as_outputs(out)
        problems = guard.output_problems(outs, ref_checks.get(tag, []) or [None] * len(outs), inputs, device)
        if not spec["reference_mutates_inputs"]:
            for i, (a, b) in enumerate(zip(inputs, pristine)):
                if isinstance(a, torch.Tensor) and not torch.equal(a, b):
                    problems.append("input %d was modified in place" % i)
        meta = session.save_outputs(out_dir, tag, [o.detach() for o in outs]) if not problems else []
        return {"tag": tag, "outputs": meta, "problems": problems, "forbidden_ops": sorted(forbidden_ops)}

    for tag, seed, factor in check_plan(spec):
        try:
            result = guarded_call(tag, scale_inputs(task.inputs(seed), factor))
        except Exception as e:  # noqa: BLE001
            channel.send(event="error", kind="run", tag=tag, message=session.error_message(e))
            return 0
        channel.send(event="check", **result)
    channel.send(event="verified", forbidden_ops=sorted(forbidden_ops), tampered=_integrity.changed(),
                 threads=guard.thread_count())

    thread_counts = []
    loop = None

    def on_trial(k, args):
        thread_counts.append(guard.thread_count())
        # Spot checks: a few timed calls are repeated, untimed, under the op
        # recorder. The candidate cannot tell these calls from the timed ones,
        # so PyTorch compute reserved for "the timing phase" is caught.
        if k in spot_checks(loop.timing_seed, loop.trials):
            recorder = guard.OpRecorder()
            with torch.no_grad(), recorder:
                model(*args)
                sync()
            forbidden_ops.update(op for op in recorder.ops if op not in allowed)

    def run_post(tag, inputs):
        result = guarded_call(tag, inputs)
        result["tampered"] = _integrity.changed()
        result["thread_counts"] = thread_counts
        return result

    loop = session.CommandLoop(channel, task, spec, device, {"candidate": lambda: model}, run_post, out_dir, on_trial)
    with torch.no_grad():
        return loop.serve()


def spot_checks(timing_seed, trials, count=3):
    """The timed calls repeated under the op recorder."""
    rng = random.Random(timing_seed * 31 + 7)
    return set(rng.sample(range(trials), min(count, trials)))
