#!/usr/bin/env bash
# Quick start: set up, build, and run the main job on the embedded default
# config (CPU): `cuda-agent train` teaches a small random policy a task with a
# verifiable reward by PPO with a critic (seconds), then the judge checks the
# bundled example kernel in the sandbox.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/src/cuda-agent train --set train.output_dir=runs/quickstart --resume auto
./build/src/cuda-agent check --backend cpu \
  --task data/examples/tasks/relu.py \
  --candidate data/examples/cpu/relu_kernelbench.py
