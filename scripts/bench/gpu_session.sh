#!/usr/bin/env bash
# Everything that needs the GPU host, in one run, results under OUT_DIR.
# On the host (after `source .device/env.sh` where gRPC is staged):
#
#   scripts/bench/gpu_session.sh OUT_DIR build|tests|judge|policy|learner ...
#
#   build    configure and build build-gpu (benchmarks included)
#   tests    ctest -L gpu, then the CPU-labelled model and rl tests on this host
#   judge    worker throughput (CUDA) and the paper recipe on the same candidates
#   policy   bf16 logit parity and decode throughput, Qwen2.5-0.5B-shaped
#   learner  PPO update tokens/s and MFU, Qwen2.5-0.5B-shaped, bf16, 4096 tokens
set -uo pipefail
out=$1
shift
mkdir -p "$out"
build=build-gpu
for step in "$@"; do
  start=$(date +%s)
  case $step in
    build)
      cmake -S . -B $build -G Ninja -DCMAKE_PREFIX_PATH="${CMAKE_PREFIX_PATH:-}" > "$out/cmake.log" 2>&1 &&
        ninja -C $build -j"$(nproc)" > "$out/build.log" 2>&1
      ;;
    tests)
      ctest --test-dir $build -L gpu --output-on-failure > "$out/gpu_tests.log" 2>&1
      ctest --test-dir $build -R "ParityTest|GeneratorTest|LearnerTest|Distributed" -j4 > "$out/model_rl_tests.log" 2>&1
      ;;
    judge)
      scripts/bench/worker_gpu.sh $build "$out" worker > "$out/worker_gpu.log" 2>&1
      scripts/bench/worker_gpu.sh $build "$out" recipe > "$out/recipe_gpu.log" 2>&1
      ;;
    policy)
      (cd scripts/bench && python3 bf16_parity.py --build "../../$build" --device cuda --dtype bfloat16 \
         --out "$out/bf16_parity.json") > "$out/bf16_parity.log" 2>&1
      python3 scripts/bench/generate.py --build $build --device cuda --out "$out/generate.json" > "$out/generate.log" 2>&1
      ;;
    learner)
      $build/learner_bench --shape qwen2.5-0.5b --device cuda --dtype bfloat16 --batch 4 --seq 4096 --steps 5 \
        --json "$out/learner.json" > "$out/learner.log" 2>&1
      ;;
    *)
      echo "unknown step $step" >&2
      exit 2
      ;;
  esac
  echo "$step: exit $? in $(( $(date +%s) - start )) s"
done
