#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite (GPU tests skip themselves
# where no GPU is visible).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
ctest --test-dir build -j "${JOBS:-2}" --output-on-failure --timeout 900
