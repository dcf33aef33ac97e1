"""The judge's Python harness (DESIGN.md §3, "The Python harness").

The C++ judge runs each mode of this package as its own sandboxed process:

  lint       parse candidate sources (no torch import) and report forbidden constructs
  pch        build the precompiled torch/extension.h header used by candidate builds
  compile    build a candidate's extension(s)
  reference  load the task, compute reference outputs and time eager / torch.compile
  candidate  load the candidate, run the checks and the timed calls

A mode reads its spec (JSON) from the path given on the command line, commands
(JSON lines) from stdin, and writes messages (JSON lines) to file descriptor 3.
Verdicts are never decided here: outputs go to files that the C++ side compares
with the reference, in a process the candidate never runs in.
"""
