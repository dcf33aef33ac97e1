#!/usr/bin/env bash
# A/B of a run-time setting of the decode path on one GPU, with one build:
# batch-1 tokens/s through the generator (persistent kernel, overlapped
# steps) with the environment variable VAR set to each VALUE in turn,
# ROUNDS rounds of VALUE1, VALUE2, ... Without a second build or a patch the
# rounds of one value spread by ~0.2% on an H100 (session 36), against ~5%
# between H200s, so changes of a few tenths of a percent show.
#
#   scripts/bench/env_ab.sh OUT_DIR ROUNDS VAR VALUE [VALUE...] [--shape=NAME]
#
# e.g. `env_ab.sh out 6 CUDA_AGENT_DECODE_PDL 1 0`. Builds generate_bench in
# build-gpu; the figures and each value's mean against the first's go into
# OUT_DIR/summary.txt.
set -euo pipefail
shape=qwen2.5-0.5b
args=()
for arg in "$@"; do
  case "$arg" in
    --shape=*) shape=${arg#--shape=} ;;
    *) args+=("$arg") ;;
  esac
done
if [ ${#args[@]} -lt 4 ]; then
  echo "usage: $0 OUT_DIR ROUNDS VAR VALUE [VALUE...] [--shape=NAME]" >&2
  exit 2
fi
out=${args[0]} rounds=${args[1]} var=${args[2]}
values=("${args[@]:3}")
mkdir -p "$out"
cmake -S . -B build-gpu -G Ninja -DCMAKE_PREFIX_PATH="${CMAKE_PREFIX_PATH:-}" > "$out/cmake.log" 2>&1
ninja -C build-gpu generate_bench > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
model=$(mktemp -d)
python3 - "$shape" "$model" <<'EOF_PY' > "$out/model.log" 2>&1
import sys
sys.path.insert(0, "scripts/bench")
import torch
import generate
generate.make_model(sys.argv[1], torch.bfloat16, sys.argv[2])
EOF_PY
: > "$out/values.txt"
for r in $(seq "$rounds"); do
  for v in "${values[@]}"; do
    env "$var=$v" build-gpu/generate_bench --model "$model" --device cuda --dtype bfloat16 --prompt-len 128 \
      --new-tokens 512 --batch 1 --overlap --decode-kernels persistent --json "$out/run.json" > "$out/run_${r}_$v.log" 2>&1
    python3 -c "import json,sys; print(sys.argv[2], json.load(open(sys.argv[1]))[0]['decode_tokens_per_s'])" \
      "$out/run.json" "$v" >> "$out/values.txt"
  done
done
rm -rf "$model"
python3 - "$out/values.txt" "$var" <<'EOF_PY' | tee "$out/summary.txt"
import collections, statistics, sys
runs = collections.OrderedDict()
for line in open(sys.argv[1]):
    v, x = line.split()
    runs.setdefault(v, []).append(float(x))
base = statistics.mean(next(iter(runs.values())))
for v, xs in runs.items():
    print("%s=%s: batch-1 tok/s %s mean %.1f, %.3f of the first" %
          (sys.argv[2], v, " ".join("%.1f" % x for x in xs), statistics.mean(xs), statistics.mean(xs) / base))
EOF_PY
