"""Entry point: python -m cuda_agent_harness MODE SPEC_JSON."""
import json
import sys

# Only stdlib at import time: the lint mode must not import torch.
from . import protocol


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: python -m cuda_agent_harness MODE SPEC_JSON\n")
        return 2
    mode, spec_path = argv[1], argv[2]
    with open(spec_path) as f:
        spec = json.load(f)
    channel = protocol.Channel()
    if mode == "lint":
        from . import lint
        channel.send(event="lint", **lint.lint_candidate(spec))
        return 0
    if mode == "pch":
        from . import build
        channel.send(event="pch", **build.build_pch(spec))
        return 0
    if mode == "compile":
        from . import build
        channel.send(event="compiled", **build.compile_candidate(spec))
        return 0
    if mode == "probe":
        from . import probe
        channel.send(event="probe", **probe.probe(spec))
        return 0
    if mode == "reference":
        from . import reference
        return reference.run(spec, channel)
    if mode == "candidate":
        from . import candidate
        return candidate.run(spec, channel)
    sys.stderr.write("unknown mode %r\n" % mode)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
