#!/usr/bin/env bash
# A/B of a change to the decode kernels on one GPU, run interleaved on the same
# machine: H200s differ from each other by up to ~5% on the same code, so
# figures from different runs cannot judge a change of a few percent.
#
#   scripts/bench/decode_ab.sh PATCH OUT_DIR [ROUNDS] [--e2e]
#
# Builds decode_kernels_bench and generate_bench twice, from the working tree
# (build-gpu) and from the tree with PATCH applied (build-gpu-ab), both at
# once; then ROUNDS rounds (default 3) of the persistent kernel alone at batch
# 1 (decode_kernels_bench), A then B; with --e2e also batch-1 tokens/s
# through the generator (generate.py, persistent kernel, overlapped steps),
# A then B, two rounds. Prints each figure and the means; logs under OUT_DIR.
set -euo pipefail
patch=$(realpath "$1")
out=$2
shift 2
rounds=3 e2e=
for arg in "$@"; do
  if [ "$arg" = --e2e ]; then e2e=$arg; else rounds=$arg; fi
done
mkdir -p "$out"
root=$(pwd)
# One fixed place, so that a second run on a machine still up rebuilds only
# what changed in build-gpu-ab (whose cache names this source directory).
variant=/tmp/decode-ab
rm -rf "$variant" && mkdir -p "$variant"
tar -cf - --exclude=./.git --exclude=./.device --exclude='./build*' . | tar -xf - -C "$variant"
git -C "$variant" apply "$patch"  # outside a repository: a plain patch
build() {  # source dir, build dir
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_PREFIX_PATH="${CMAKE_PREFIX_PATH:-}" > "$out/cmake_$(basename "$2").log" 2>&1 &&
    ninja -C "$2" decode_kernels_bench generate_bench > "$out/build_$(basename "$2").log" 2>&1
}
build "$root" "$root/build-gpu" & a=$!
build "$variant" "$root/build-gpu-ab" & b=$!
wait $a || { echo "A failed to build: $out/build_build-gpu.log"; exit 1; }
wait $b || { echo "B failed to build: $out/build_build-gpu-ab.log"; exit 1; }

kernel_us() {  # build dir, log: the persistent kernel's mean microseconds
  CUDA_AGENT_DECODE_PDL=0 "$1/decode_kernels_bench" --batch 1 --json "$2.json" > "$2" 2>&1
  python3 -c "import json,sys; print(next(r['us'] for r in json.load(open(sys.argv[1]))['rows'] if r['kernel'] == 'persistent'))" "$2.json"
}
tokens_per_s() {  # build dir, log
  python3 scripts/bench/generate.py --build "$1" --batches 1 --without-transformers --decode-kernels persistent \
    --overlap --out "$2.json" > "$2" 2>&1
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['rows'][0]['cuda_agent_persistent_tokens_per_s'])" "$2.json"
}
summary() {  # what, then A values, --, B values
  python3 - "$@" <<'EOF'
import statistics, sys
what, rest = sys.argv[1], sys.argv[2:]
split = rest.index("--")
a, b = [float(x) for x in rest[:split]], [float(x) for x in rest[split + 1:]]
ma, mb = statistics.mean(a), statistics.mean(b)
print("%s: A %s mean %.1f | B %s mean %.1f | B/A %.3f" % (what, " ".join("%.1f" % x for x in a), ma,
      " ".join("%.1f" % x for x in b), mb, mb / ma))
EOF
}
ka=() kb=()
for r in $(seq "$rounds"); do
  ka+=("$(kernel_us build-gpu "$out/kernel_a_$r.log")")
  kb+=("$(kernel_us build-gpu-ab "$out/kernel_b_$r.log")")
done
summary "persistent kernel, batch 1, us" "${ka[@]}" -- "${kb[@]}" | tee "$out/summary.txt"
if [ "$e2e" = "--e2e" ]; then
  ta=() tb=()
  for r in 1 2; do
    ta+=("$(tokens_per_s build-gpu "$out/e2e_a_$r.log")")
    tb+=("$(tokens_per_s build-gpu-ab "$out/e2e_b_$r.log")")
  done
  summary "batch-1 decode, tok/s" "${ta[@]}" -- "${tb[@]}" | tee -a "$out/summary.txt"
fi
rm -rf "$variant"
