#!/usr/bin/env bash
# Installs overlap's Python environment, idempotently: a virtual environment (default
# ~/.cache/overlap/venv, outside the source tree so that Bazel's globs and `git clean` never
# see it; OVERLAP_VENV moves it) holding exactly tools/requirements.txt, installed with
# `pip install --no-deps` (the file pins every dependency). Returns at once, printing only the
# interpreter's path, when the environment already holds that file's packages (a stamp of the
# file's hash, written after torch imported and computed a gradient there).
#
# Smallest install: torch's PyPI wheel links CUDA 13's libraries at load time, GPU or not.
# Where /usr/local/cuda has CUDA 13.0's runtime, the `# cuda13` lines are left out and the
# loader finds those libraries there (about 1.1 GB downloaded instead of 3 GB); elsewhere they
# are installed. docs/interop.md, "Python environment", has the figures.
#
#   tools/venv.sh            install or check; prints the environment's python on stdout
#                            (tools/python.sh finds it there by default)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
home="$(getent passwd "$(id -u)" | cut -d: -f6)"  # Bazel's tests run with another HOME
venv="${OVERLAP_VENV:-${home:-$HOME}/.cache/overlap/venv}"
py="$venv/bin/python"
req="$root/tools/requirements.txt"
stamp="$venv/.overlap-requirements"
want="$(sha256sum "$req" | cut -d' ' -f1)"

# The check a working environment passes: torch imports and computes a gradient.
check() {
  "$py" -c 'import torch, torchvision
x = torch.ones(2, requires_grad=True)
(x * x).sum().backward()
assert x.grad.tolist() == [2.0, 2.0]' >/dev/null 2>&1
}

# `import overlap` in the environment: a .pth naming this checkout's python/ (the package;
# its extension is Bazel's bazel-bin/python/overlap/_overlap.so, found from there). The
# checkout that ran this last is the one imported.
link_package() {
  local site
  site="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" &&
    printf '%s\n' "$root/python" >"$site/overlap.pth"
}
# The stamp is written only after the check passed on this very file's packages.
if [ -x "$py" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  link_package
  echo "$py"
  exit 0
fi

base="${OVERLAP_BASE_PYTHON:-python3}"
if ! "$base" -c 'import sys, venv, ensurepip; assert sys.version_info >= (3, 10)' 2>/dev/null; then
  echo "venv: $base is not Python 3.10+ with venv and ensurepip; installing Debian's" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    python3 python3-venv >&2
  base=/usr/bin/python3
fi
start=$(date +%s)
echo "venv: installing tools/requirements.txt into $venv (a few minutes the first time)" >&2
[ -x "$py" ] || "$base" -m venv "$venv" >&2
list="$(mktemp)"
trap 'rm -f "$list"' EXIT
if [ -e /usr/local/cuda/lib64/libcudart.so.13 ] && [ -e /usr/local/cuda/lib64/libcudnn.so.9 ]; then
  grep -v '# cuda13' "$req" >"$list"
else
  cp "$req" "$list"
fi
"$py" -m pip install -q --disable-pip-version-check --no-deps -r "$list" >&2
if ! check; then
  echo "venv: torch does not import in $venv; installing the CUDA libraries from PyPI too" >&2
  "$py" -m pip install -q --disable-pip-version-check --no-deps -r "$req" >&2
  check || {
    "$py" -c 'import torch' >&2 || true
    echo "venv: torch still does not import in $venv" >&2
    exit 1
  }
fi
echo "$want" >"$stamp"
link_package
echo "venv: ready in $(($(date +%s) - start)) s ($(du -sh "$venv" | cut -f1))" >&2
echo "$py"
