#!/usr/bin/env bash
# Quick start: set up, build, and run the main job on the bundled example (CPU).
# Until the training loop exists the main job is the judge: one honest candidate
# kernel checked against its task, compiled, verified and timed in the sandbox.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/src/cuda-agent check --backend cpu \
  --task data/examples/tasks/relu.py \
  --candidate data/examples/cpu/relu_kernelbench.py
