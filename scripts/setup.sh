#!/usr/bin/env bash
# Installs everything cuda-agent needs on a fresh Debian 12 machine, idempotently:
# the C++ toolchain and Debian's -dev packages, and from PyPI torch==2.11.0 + numpy
# plus transformers/tokenizers/safetensors (the reference in the policy's parity tests).
# Safe to run again: it only installs what is missing.
set -euo pipefail

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache git
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libspdlog-dev nlohmann-json3-dev libyaml-cpp-dev libgtest-dev libgmock-dev libcli11-dev
  libseccomp-dev libpcre2-dev libutf8proc-dev libgloo-dev libssl-dev openssl python3 python3-pip
)
TORCH_VERSION=2.11.0
TRANSFORMERS_VERSION=4.57.1

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c "import torch, numpy, sys; sys.exit(0 if torch.__version__.startswith('$TORCH_VERSION') else 1)" 2>/dev/null; then
  echo "setup: installing torch==$TORCH_VERSION and numpy with $PYTHON"
  # Debian's own python3 refuses system-wide pip installs without this flag.
  "$PYTHON" -m pip install -q "torch==$TORCH_VERSION" numpy 2>/dev/null ||
    "$PYTHON" -m pip install -q --break-system-packages "torch==$TORCH_VERSION" numpy
fi
if ! "$PYTHON" -c "import transformers, tokenizers, safetensors, sys; sys.exit(0 if transformers.__version__ == '$TRANSFORMERS_VERSION' else 1)" 2>/dev/null; then
  echo "setup: installing transformers==$TRANSFORMERS_VERSION, tokenizers and safetensors with $PYTHON"
  "$PYTHON" -m pip install -q "transformers==$TRANSFORMERS_VERSION" tokenizers safetensors 2>/dev/null ||
    "$PYTHON" -m pip install -q --break-system-packages "transformers==$TRANSFORMERS_VERSION" tokenizers safetensors
fi
echo "setup: ok ($("$PYTHON" -c 'import torch; print("torch", torch.__version__)'), $(cmake --version | head -1))"
