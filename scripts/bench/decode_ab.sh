#!/usr/bin/env bash
# A/B of changes to the decode kernels on one GPU, run interleaved on the same
# machine: H200s differ from each other by up to ~5% on the same code, so
# figures from different runs cannot judge a change of a few percent.
#
#   scripts/bench/decode_ab.sh PATCH [PATCH...] OUT_DIR [ROUNDS] [--e2e[=N]] [--test] [--profile] [--shape=NAME]
#     [--prebuilt=TARBALL]
#
# Builds decode_kernels_bench and generate_bench from the working tree (A, in
# build-gpu) and from the tree with each PATCH applied (B, C, ... in
# build-gpu-ab, build-gpu-ab2, ...), all at once; then ROUNDS rounds (default
# 3) of the persistent kernel alone at batch 1 (decode_kernels_bench), each
# round A then every variant; with --e2e also batch-1 tokens/s through the
# generator (generate.py, persistent kernel, overlapped steps), N rounds
# (default 2; a change of ~1% end to end needs more).
# ROUNDS 0 with --e2e: a change outside the kernel (the bench calls the
# kernel directly and would not see it), end to end only. With --test,
# each build's generate_gpu_test runs first (a kernel change must pass it);
# with --profile, each build's batch-1 decode once under the profiler, and
# where its step's time goes (step_profile.py) into the summary; with
# --shape=qwen2.5-1.5b, the kernel and the generator at that model shape.
# Prints each figure and each variant's mean against A's into
# OUT_DIR/summary.txt; the logs and each build's last kernel timeline go
# into OUT_DIR/logs.tar.gz (one file: the GPU host's tool brings back only
# so many). scripts/bench/floor/ holds timing-only patches (the kernel with
# no waits on other blocks, with no weight copies) for the kernel's floors.
# Time on a machine just started: one patch with --e2e --test and 3 rounds
# took 324 s on an H200; two patches ran past the device's 600 s a command
# on an H100 (three full builds at once), so give a cold machine one patch.
# With --prebuilt=TARBALL (scripts/bench/prebuild_ab.sh, run on the CPU
# machine with the same patches) nothing is built here: the variants'
# binaries are unpacked into the build directories and run with this
# host's torch libraries.
set -euo pipefail
source "$(dirname "$0")/ab_variants.sh"
patches=()
while [ $# -gt 0 ] && [ -f "$1" ]; do
  patches+=("$(realpath "$1")")
  shift
done
if [ ${#patches[@]} -eq 0 ] || [ $# -eq 0 ]; then
  echo "usage: $0 PATCH [PATCH...] OUT_DIR [ROUNDS] [--e2e[=N]] [--test] [--profile] [--shape=NAME]" \
    "[--prebuilt=TARBALL]" >&2
  exit 2
fi
out=$1
shift
rounds=3 e2e=0 test= profile= shape=qwen2.5-0.5b prebuilt=
for arg in "$@"; do
  case "$arg" in
    --prebuilt=*) prebuilt=$(realpath "${arg#--prebuilt=}") ;;
    --shape=*) shape=${arg#--shape=} ;;
    --e2e) e2e=2 ;;
    --e2e=*) e2e=${arg#--e2e=} ;;
    --test) test=generate_gpu_test ;;
    --profile) profile=$arg ;;
    *) rounds=$arg ;;
  esac
done
mkdir -p "$out"
root=$(pwd)

# Variant v (0-based) of the patches: its source and build directories, at
# fixed places, so that a second run on a machine still up rebuilds only what
# changed (a build's cache names its source directory).
suffix() { [ "$1" = 0 ] || echo $(($1 + 1)); }
build() {  # source dir, build dir
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_PREFIX_PATH="${CMAKE_PREFIX_PATH:-}" > "$out/cmake_$(basename "$2").log" 2>&1 &&
    ninja -C "$2" decode_kernels_bench generate_bench $test > "$out/build_$(basename "$2").log" 2>&1
}
builds=(build-gpu)
if [ -n "$prebuilt" ]; then
  # The manifest's variants must be these patches, in this order.
  rm -rf "$root/build-gpu"*
  xz -dc "$prebuilt" | tar -C "$root" -xf -
  mv "$root/manifest.txt" "$out/manifest.txt" && cat "$out/manifest.txt"
  for v in "${!patches[@]}"; do
    builds+=("$(variant_dir "$v")")
    line=$(grep "^${builds[-1]} " "$out/manifest.txt" | cut -d' ' -f2-)
    want=$(patch_label "${patches[$v]}")
    [ "$line" = "$want" ] || { echo "${builds[-1]} in $prebuilt is '$line', not '$want'" >&2; exit 1; }
  done
  # generate_gpu_test reads its fixtures' script from the tree it was built
  # in, and keeps them in that tree's build/test-cache.
  src=$(sed -n 's/^root //p' "$out/manifest.txt")
  if [ "$src" != "$root" ] && [ ! -e "$src" ]; then mkdir -p "$(dirname "$src")" && ln -s "$root" "$src"; fi
  mkdir -p "$root/build/test-cache"
  torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
  export LD_LIBRARY_PATH="$torch_lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
pids=()
if [ -z "$prebuilt" ]; then
  build "$root" "$root/build-gpu" &
  pids+=($!)
  for v in "${!patches[@]}"; do
    variant=/tmp/decode-ab$(suffix "$v")
    rm -rf "$variant" && mkdir -p "$variant"
    tar -cf - --exclude=./.git --exclude=./.device --exclude='./build*' . | tar -xf - -C "$variant"
    git -C "$variant" apply "${patches[$v]}"  # outside a repository: a plain patch
    builds+=("$(variant_dir "$v")")
    # The copy keeps the tree's times, so a file the build's last patch
    # changed and this one does not would look older than its object: touch
    # those so that they build again.
    last="$root/${builds[-1]}/ab.patch"
    if [ -f "$last" ]; then
      sed -n 's|^+++ b/\([^[:space:]]*\).*|\1|p' "$last" |
        while read -r f; do [ ! -f "$variant/$f" ] || touch "$variant/$f"; done
    fi
    mkdir -p "$root/${builds[-1]}" && cp "${patches[$v]}" "$last"
    build "$variant" "$root/${builds[-1]}" &
    pids+=($!)
  done
fi
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { echo "${builds[$i]} failed to build: $out/build_${builds[$i]}.log"; exit 1; }
done

# Each run under a time limit: a kernel that deadlocks (a patch's new
# synchronisation) must not take the device's whole command.
kernel_us() {  # build dir, log: the persistent kernel's mean microseconds
  CUDA_AGENT_DECODE_PDL=0 timeout 120 "$1/decode_kernels_bench" --shape "$shape" --batch 1 --json "$2.json" > "$2" 2>&1
  python3 -c "import json,sys; print(next(r['us'] for r in json.load(open(sys.argv[1]))['rows'] if r['kernel'] == 'persistent'))" "$2.json"
}
tokens_per_s() {  # build dir, log
  timeout 180 python3 scripts/bench/generate.py --build "$1" --shape "$shape" --batches 1 --without-transformers \
    --decode-kernels persistent --overlap --out "$2.json" > "$2" 2>&1
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['rows'][0]['cuda_agent_persistent_tokens_per_s'])" "$2.json"
}
summary() {  # what, then each build's figures, "--" between builds
  python3 - "$@" <<'EOF'
import statistics, sys
what, groups = sys.argv[1], [[]]
for x in sys.argv[2:]:
    if x == "--":
        groups.append([])
    else:
        groups[-1].append(float(x))
base = statistics.mean(groups[0])
line = "%s: A %s mean %.1f" % (what, " ".join("%.1f" % x for x in groups[0]), base)
for name, g in zip("BCDEFGHIJ", groups[1:]):
    m = statistics.mean(g)
    line += " | %s %s mean %.1f %s/A %.3f" % (name, " ".join("%.1f" % x for x in g), m, name, m / base)
print(line)
EOF
}
measure() {  # figure function, rounds, what, log name
  local values=() args=() r i
  for r in $(seq "$2"); do
    for i in "${!builds[@]}"; do
      values[$i]="${values[$i]:-} $($1 "${builds[$i]}" "$out/$4_${i}_$r.log")"
    done
  done
  for i in "${!builds[@]}"; do
    [ "$i" = 0 ] || args+=(--)
    args+=(${values[$i]})
  done
  summary "$3" "${args[@]}" | tee -a "$out/summary.txt"
}
: > "$out/summary.txt"
# A variant that fails its test (or hangs: 124) is not timed: figures of a
# wrong kernel judge nothing.
if [ -n "$test" ]; then
  failed=0
  for b in "${builds[@]}"; do
    timeout 150 "$b/tests/generate_gpu_test" > "$out/gpu_test_$b.log" 2>&1 && result=passed || result="FAILED ($?)"
    ok=$(grep -c '^\[       OK \]' "$out/gpu_test_$b.log" || true)
    # Every test skipped (no GPU seen, a fixture missing) judges nothing either.
    [ "$result" != passed ] || [ "$ok" -gt 0 ] || result="FAILED (no test ran)"
    echo "$b generate_gpu_test: $result, $ok tests ok" | tee -a "$out/summary.txt"
    [ "$result" = passed ] || failed=1
  done
  if [ "$failed" = 1 ]; then rounds=0 e2e=0 profile=; fi
fi
if [ -n "$profile" ]; then
  for b in "${builds[@]}"; do
    if python3 scripts/bench/generate.py --build "$b" --shape "$shape" --batches 1 --without-transformers \
      --decode-kernels persistent --overlap --profile --out "$out/profile_$b.json" > "$out/profile_$b.log" 2>&1; then
      python3 scripts/bench/step_profile.py --match persistent "$out/profile_$b.json" | tee -a "$out/summary.txt"
    else
      echo "$b: the profiled run failed: $out/profile_$b.log" | tee -a "$out/summary.txt"
    fi
  done
fi
if [ "$rounds" -gt 0 ]; then measure kernel_us "$rounds" "persistent kernel, batch 1, us" kernel; fi
if [ "$e2e" -gt 0 ]; then measure tokens_per_s "$e2e" "batch-1 decode, tok/s" e2e; fi
for v in "${!patches[@]}"; do rm -rf "/tmp/decode-ab$(suffix "$v")"; done
(cd "$out" && find . -type f ! -name summary.txt ! -name logs.tar.gz | tar -czf logs.tar.gz -T - &&
  find . -type f ! -name summary.txt ! -name logs.tar.gz -delete)
