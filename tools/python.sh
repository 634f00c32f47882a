# Which Python runs overlap's Python tools and tests (the exporter, compare, zoo, bench):
# sourced, it sets OVERLAP_PY; run, it prints it.
#
#   OVERLAP_PYTHON, when set: that interpreter. `OVERLAP_PYTHON=$(tools/venv.sh)` selects
#   overlap's torch 2.x environment (tools/requirements.txt).
#   Otherwise Debian's /usr/bin/python3 with python3-torch 1.13 (tools/bootstrap.sh
#   --with-torch): the interpreter the test suite runs under until the exporter passes its
#   tests on torch 2.x (docs/interop.md, "Python environments").
OVERLAP_PY="${OVERLAP_PYTHON:-/usr/bin/python3}"
# What scripts that need only the standard library run: that interpreter where it exists,
# else any python3.
if [ -x "$OVERLAP_PY" ]; then
  OVERLAP_STDLIB_PY="$OVERLAP_PY"
else
  OVERLAP_STDLIB_PY="$(command -v python3 || echo /usr/bin/python3)"
fi
if [ "${BASH_SOURCE[0]}" = "$0" ]; then echo "$OVERLAP_PY"; fi
