# Which Python runs overlap's Python tools and tests (the exporter, compare, zoo, bench):
# sourced, it sets OVERLAP_PY; run, it prints it.
#
#   OVERLAP_PYTHON, when set: that interpreter.
#   Otherwise overlap's torch 2.x environment, which tools/venv.sh installs (torch 2.14.1,
#   torchvision, transformers, timm, deepspeed: tools/requirements.txt), found under the
#   user's home as the password database gives it (Bazel runs tests with HOME elsewhere).
overlap_home="$(getent passwd "$(id -u)" | cut -d: -f6)"
OVERLAP_PY="${OVERLAP_PYTHON:-${OVERLAP_VENV:-${overlap_home:-$HOME}/.cache/overlap/venv}/bin/python}"
unset overlap_home
# What scripts that need only the standard library run: that interpreter where it exists,
# else any python3.
if [ -x "$OVERLAP_PY" ]; then
  OVERLAP_STDLIB_PY="$OVERLAP_PY"
else
  OVERLAP_STDLIB_PY="$(command -v python3 || echo /usr/bin/python3)"
fi
if [ "${BASH_SOURCE[0]}" = "$0" ]; then echo "$OVERLAP_PY"; fi
