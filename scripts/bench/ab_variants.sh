# Sourced by decode_ab.sh and prebuild_ab.sh: how a variant of the A/B is
# named, so that a prebuilt tarball's manifest and the run that uses it agree.
# The build directory of patch v (0-based): build-gpu-ab, build-gpu-ab2, ...
variant_dir() { echo "build-gpu-ab$([ "$1" = 0 ] || echo $(($1 + 1)))"; }
# A patch as the manifest names it: its file name and checksum.
patch_label() { echo "$(basename "$1") $(sha256sum < "$1" | cut -c1-16)"; }
