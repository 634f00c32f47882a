#!/usr/bin/env bash
# Installs what overlap needs on Debian 12 (run as root), idempotently: it asks dpkg which
# packages are missing and runs `apt-get update` + `apt-get install` only when some are.
# CUDA 13 / NCCL 2.28, when present, come from /usr/local/cuda (not from Debian); nothing in
# the default build needs them.
#
#   tools/bootstrap.sh [--with-torch]   (--with-torch: also overlap's Python environment,
#                                       tools/venv.sh: torch 2.x, torchvision, transformers,
#                                       timm and deepspeed as tools/requirements.txt pins
#                                       them; the exporter's tests need it, the demo does not)
set -euo pipefail
with_torch=0
[ "${1:-}" = "--with-torch" ] && with_torch=1

packages=(
  bazel-bootstrap        # Bazel 4.2.3, WORKSPACE mode
  g++                    # the default toolchain
  clang                  # fuzz builds (--config=fuzz, .clusterfuzzlite/build.sh)
  clang-format           # tools/test.sh fails on unformatted C++
  libclang-rt-14-dev     # libFuzzer and sanitizer runtimes for clang 14
  libabsl-dev
  libgtest-dev
  libgmock-dev
  librapidcheck-dev
  libbenchmark-dev
  nlohmann-json3-dev
  libgloo-dev
  libopenblas-dev        # the CPU kernels' matrix products (runtime/core/blas.h)
  libdnnl-dev            # the CPU convolutions (runtime/core/dnnl_conv.h)
  libsleef-dev           # vectorized exp / erf / tanh (runtime/core/vmath.h)
  zip                    # seed-corpus archives (.clusterfuzzlite/build.sh)
  unzip                  # tools/check_oss_fuzz.sh reads them back
  graphviz               # tools/pictures_test.sh renders the partition DOT files
  ccache                 # tools/check_oss_fuzz.sh keeps its objects between runs
  pybind11-dev           # the Python extension (python/: `import overlap`)
  python3-dev            # Python 3.11's headers, the ABI of overlap's environment's Python
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} > 0)); then
  echo "bootstrap: installing ${missing[*]}" >&2
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if ((with_torch)); then
  "$(dirname "$0")/venv.sh" >/dev/null
fi
