#!/usr/bin/env bash
# Builds decode_ab.sh's variants here, on the CPU machine, for a GPU host
# whose time is short: a build there takes ~150-250 s of each run, the
# measuring itself ~60-200.
#
#   scripts/bench/prebuild_ab.sh PATCH [PATCH...] TARBALL
#   (then, on the GPU host, carrying TARBALL)
#   scripts/bench/decode_ab.sh PATCH [PATCH...] OUT --prebuilt=TARBALL [ROUNDS] [--e2e[=N]] [--test] ...
#
# Builds decode_kernels_bench, generate_bench and generate_gpu_test in
# `build` (scripts/build.sh's, so ccache and the objects already there serve)
# for the tree with each PATCH applied in turn (B, C, ...; each taken back
# after its build) and as it is (A), strips them and packs them, with a
# manifest naming each variant's patch and its checksum, into TARBALL
# (xz; each variant ~17 MB, and the GPU host's tool carries 64 MiB in all).
# The local torch wheel is the GPU host's version with CUDA 13.0, so the
# binaries run there with that host's torch libraries on LD_LIBRARY_PATH
# (decode_ab.sh sets it). The tree's tracked files must be clean.
set -euo pipefail
source "$(dirname "$0")/ab_variants.sh"
patches=()
while [ $# -gt 1 ] && [ -f "$1" ]; do
  patches+=("$(realpath "$1")")
  shift
done
if [ ${#patches[@]} -eq 0 ] || [ $# -ne 1 ]; then
  echo "usage: $0 PATCH [PATCH...] TARBALL" >&2
  exit 2
fi
tarball=$(realpath -m "$1")
if ! git diff --quiet HEAD --; then
  echo "$0: the tree has uncommitted changes; A must be a commit" >&2
  exit 1
fi
targets=(decode_kernels_bench generate_bench generate_gpu_test)
files=(decode_kernels_bench generate_bench tests/generate_gpu_test)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
[ -f build/build.ninja ] || bash scripts/build.sh > /dev/null
# Builds the targets and strips them into $stage/DIR, with its line of the manifest.
variant() {  # dir, what
  echo "building $2 ..." >&2
  ninja -C build -j2 "${targets[@]}" > "$stage/$1.log" 2>&1 || { tail -30 "$stage/$1.log" >&2; return 1; }
  mkdir -p "$stage/$1/tests"
  for f in "${files[@]}"; do strip -o "$stage/$1/$f" "build/$f"; done
  echo "$1 $2" >> "$stage/manifest.txt"
}
# generate_gpu_test names its fixtures' script and cache by this tree's path
# (compiled in): decode_ab.sh links that path to its own tree.
printf 'commit %s\nroot %s\n' "$(git rev-parse HEAD)" "$(pwd)" > "$stage/manifest.txt"
# The patches first and A last, so that `build` is left as the tree is.
for v in "${!patches[@]}"; do
  git apply "${patches[$v]}"
  built=0
  variant "$(variant_dir "$v")" "$(patch_label "${patches[$v]}")" || built=$?
  git apply -R "${patches[$v]}"
  [ "$built" = 0 ] || exit 1
done
variant build-gpu "A"
rm -f "$stage"/*.log
# One xz stream with a dictionary past a binary's size, so that the
# variants' shared code packs once.
tar -C "$stage" -cf - . | xz -T2 -6 --lzma2=preset=6,dict=64MiB > "$tarball"
echo "$tarball: $(du -h "$tarball" | cut -f1)" >&2
cat "$stage/manifest.txt" >&2
