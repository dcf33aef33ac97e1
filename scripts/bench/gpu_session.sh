#!/usr/bin/env bash
# Everything that needs the GPU host, in one run, results under OUT_DIR.
# On the host (after `source .device/env.sh` where gRPC is staged):
#
#   scripts/bench/gpu_session.sh OUT_DIR build|tests|judgetests|judge|policy|decode|learner|train|profile|sync ...
#
#   build       configure and build build-gpu (benchmarks included)
#   tests       the GPU tests of the model and the learner (CUDA graphs, NCCL),
#               then the CPU-labelled model and rl tests on this host
#   judgetests  the judge's GPU tests (honest, wrong and cheating candidates)
#   judge       worker throughput (CUDA) and the paper recipe on the same candidates
#   policy      bf16 logit parity and decode throughput (ATen, fused and
#               persistent decode kernels, kernel profiles), Qwen2.5-0.5B-shaped,
#               and batch-1 decode on the Qwen2.5-1.5B shape
#   learner     PPO update tokens/s, MFU and kernel profile, Qwen2.5-0.5B-shaped,
#               bf16, 4096 tokens; on one GPU and, where there are two, on both
#               (sharded and replicated optimizer state)
#   train       cuda-agent train on the GPU (and on two through torchrun)
#   profile     decode kernels alone (decode_kernels_bench, with the persistent
#               kernel's per-stage timeline) and under Nsight Compute, with the
#               persistent kernel's per-instruction stall samples summarised
#               (ncu_source_summary.py)
#   sync        how long blocks of a persistent kernel wait for each other
#               (sync_latency_bench: grid barrier polls, a flag between two
#               blocks, cluster barriers and exchanges through distributed
#               shared memory, cooperative launches in clusters)
#   decode      batch-1 decode tokens/s: ATen, fused and persistent kernels next to
#               transformers (the quick form of `policy`), then ATen and persistent
#               with overlapped steps (GeneratorOptions::overlap, with the GPU time
#               per kernel), then both at batches 2, 4 and 8
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
      ctest --test-dir $build -R "GeneratorGpuTest|FusedOpsGpuTest|DistributedGpuTest" --output-on-failure > "$out/gpu_tests.log" 2>&1
      ctest --test-dir $build -R "ParityTest|GeneratorTest|LearnerTest|DistributedTest" -j8 > "$out/model_rl_tests.log" 2>&1
      ;;
    judgetests)
      ctest --test-dir $build -R JudgeGpu --output-on-failure > "$out/judge_gpu_tests.log" 2>&1
      ;;
    judge)
      scripts/bench/worker_gpu.sh $build "$out" worker > "$out/worker_gpu.log" 2>&1
      scripts/bench/worker_gpu.sh $build "$out" recipe > "$out/recipe_gpu.log" 2>&1
      ;;
    policy)
      (cd scripts/bench && python3 bf16_parity.py --build "../../$build" --device cuda --dtype bfloat16 \
         --out "$out/bf16_parity.json") > "$out/bf16_parity.log" 2>&1
      python3 scripts/bench/generate.py --build $build --device cuda --profile --decode-kernels fused persistent --out "$out/generate.json" > "$out/generate.log" 2>&1
      # Batch 1 on a model with 3x the bytes a step: how the per-layer latency weighs there.
      python3 scripts/bench/generate.py --build $build --device cuda --shape qwen2.5-1.5b --batches 1 \
        --decode-kernels persistent --out "$out/generate_1.5b.json" > "$out/generate_1.5b.log" 2>&1
      ;;
    decode)
      python3 scripts/bench/generate.py --build $build --device cuda --batches 1 \
        --decode-kernels fused persistent --out "$out/generate_b1.json" > "$out/generate_b1.log" 2>&1
      python3 scripts/bench/generate.py --build $build --device cuda --batches 1 \
        --decode-kernels persistent --overlap --profile --out "$out/generate_b1_overlap.json" \
        > "$out/generate_b1_overlap.log" 2>&1
      python3 scripts/bench/generate.py --build $build --device cuda --batches 2 4 8 --without-transformers \
        --decode-kernels persistent --overlap --out "$out/generate_b248.json" > "$out/generate_b248.log" 2>&1
      ;;
    learner)
      : > "$out/learner.log"
      for mb in 1 4; do
        args=(--shape qwen2.5-0.5b --device cuda --dtype bfloat16 --batch 4 --micro-batch $mb --seq 4096 --steps 5)
        $build/learner_bench "${args[@]}" --profile --json "$out/learner_mb$mb.json" >> "$out/learner.log" 2>&1
        if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
          for shard in 1 0; do  # ZeRO-1, then the whole optimizer state on each GPU
            python3 -m torch.distributed.run --nproc-per-node 2 --no-python $build/learner_bench "${args[@]}" \
              --shard-optimizer $shard --profile --json "$out/learner_2gpu_mb${mb}_shard$shard.json" \
              >> "$out/learner.log" 2>&1
          done
        fi
      done
      ;;
    profile)
      # Where a batch-1 decode step's time goes: each decode kernel alone next to
      # cuBLAS and the persistent kernel's own per-stage timeline, then Nsight
      # Compute on one warmed-up launch of each kernel (instructions executed and
      # sampled stall reasons included), all in one file.
      CUDA_AGENT_DECODE_PDL=0 $build/decode_kernels_bench --batch 1 --json "$out/decode_kernels.json" \
        > "$out/decode_kernels.log" 2>&1
      stalls=smsp__inst_executed.sum
      for reason in barrier long_scoreboard short_scoreboard wait no_instructions selected mio_throttle \
          math_pipe_throttle branch_resolving membar lg_throttle sleeping; do
        stalls+=,smsp__pcsamp_warps_issue_stalled_$reason
      done
      : > "$out/ncu.txt"
      for kernel in DecodeLayersKernel DecodeGemvKernel DecodeAttentionKernel; do
        ncu --kernel-name regex:$kernel --launch-skip 3 --launch-count 1 --section SpeedOfLight \
          --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
          --section MemoryWorkloadAnalysis --section SourceCounters --section InstructionStats --metrics "$stalls" \
          -o "$out/$kernel" $build/decode_kernels_bench --plain --iters 1 >> "$out/ncu.txt" 2>&1
        ncu -i "$out/$kernel.ncu-rep" >> "$out/ncu.txt" 2>&1
      done
      # The persistent kernel's stall samples per instruction, summarised.
      ncu -i "$out/DecodeLayersKernel.ncu-rep" --page source --csv --print-source sass > "$out/persistent_sass.csv" &&
        python3 scripts/bench/ncu_source_summary.py "$out/persistent_sass.csv" > "$out/persistent_sass_summary.txt"
      rm -f "$out"/*.ncu-rep
      ;;
    sync)
      $build/sync_latency_bench > "$out/sync_latency.log" 2>&1
      ;;
    train)
      # The training loop on one GPU (fp32, bf16) and, where there are two, on both through torchrun.
      for dtype in float32 bfloat16; do
        $build/src/cuda-agent train --set model.device=cuda --set model.dtype=$dtype \
          --set train.output_dir="$out/train_1gpu_$dtype" > "$out/train_1gpu_$dtype.log" 2>&1
      done
      if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
        python3 -m torch.distributed.run --nproc-per-node 2 --no-python $build/src/cuda-agent train \
          --set model.device=cuda --set train.output_dir="$out/train_2gpu" > "$out/train_2gpu.log" 2>&1
      fi
      rm -rf "$out"/train_*/step_*  # checkpoints: not needed back
      ;;
    *)
      echo "unknown step $step" >&2
      exit 2
      ;;
  esac
  echo "$step: exit $? in $(( $(date +%s) - start )) s"
done
