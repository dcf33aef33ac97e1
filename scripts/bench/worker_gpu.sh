#!/usr/bin/env bash
# Worker throughput on the CUDA backend next to the paper's recipe, on the same
# KernelBench-format candidates (8 kernels: 5 tasks, honest, wrong and cheating).
#
#   scripts/bench/worker_gpu.sh BUILD_DIR OUT_DIR worker   # cold pass, 2 warm passes of new sources, 1 repeated
#   scripts/bench/worker_gpu.sh BUILD_DIR OUT_DIR recipe   # the paper's recipe, one candidate at a time
#
# BUILD_DIR must hold worker_throughput (-DCUDA_AGENT_BUILD_BENCH=ON). The
# worker pass starts from an empty judge cache, so pass 1 is cold.
set -euo pipefail
build=$1
out=$2
what=$3
ex=data/examples
kb=("$ex/tasks/relu.py:$ex/cuda/relu_kernelbench.py"
    "$ex/tasks/relu.py:$ex/cuda/relu_wrong.py"
    "$ex/tasks/relu.py:$ex/cuda/relu_cheat.py"
    "$ex/tasks/relu_large.py:$ex/cuda/relu_kernelbench.py"
    "$ex/tasks/add.py:$ex/cuda/add_kernelbench.py"
    "$ex/tasks/scale_bias.py:$ex/cuda/scale_bias_kernelbench.py"
    "$ex/tasks/softmax.py:$ex/cuda/softmax_kernelbench.py"
    "$ex/tasks/row_sum.py:$ex/cuda/row_sum_kernelbench.py")
ws=("$ex/tasks/relu.py:$ex/cuda/relu_workspace"
    "$ex/tasks/relu.py:$ex/cuda/relu_workspace_wrong"
    "$ex/tasks/relu.py:$ex/cuda/relu_workspace_cheat"
    "$ex/tasks/relu_large.py:$ex/cuda/relu_workspace")
mkdir -p "$out"
case $what in
  worker)
    cache=$(mktemp -d /tmp/worker-gpu-cache.XXXXXX)
    cores=$(nproc)
    slots=$(( cores < 12 ? cores : 12 ))
    "$build/worker_throughput" --backend cuda --workers 1 --max-concurrent "$slots" --concurrency "$slots" \
      --repeat 3 --unique-sources --set "judge.cache_dir=$cache" --json "$out/worker_kb.json" "${kb[@]}"
    "$build/worker_throughput" --backend cuda --workers 1 --max-concurrent "$slots" --concurrency "$slots" \
      --repeat 2 --set "judge.cache_dir=$cache" --json "$out/worker_repeated.json" "${kb[@]}" "${ws[@]}"
    ;;
  recipe)
    python3 scripts/bench/paper_recipe.py --device cuda --out "$out/recipe.json" "${kb[@]}"
    ;;
  *)
    echo "usage: $0 BUILD_DIR OUT_DIR worker|recipe" >&2
    exit 2
    ;;
esac
