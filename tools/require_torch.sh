# Sourced by the tests that need torch: `require_torch NAME "import ..."` returns when
# overlap's Python environment (tools/python.sh: $OVERLAP_PY, installed by tools/venv.sh) can
# run the import; otherwise the test fails, saying how to install it, when
# OVERLAP_REQUIRE_TORCH=1 (the test command sets it: tools/bootstrap.sh --with-torch installed
# the environment), and skips, saying so, when not.
source "$(dirname "${BASH_SOURCE[0]}")/python.sh"
require_torch() {
  local name=$1 import=$2
  if [ -x "$OVERLAP_PY" ] && "$OVERLAP_PY" -c "$import" 2>/dev/null; then return 0; fi
  if [ "${OVERLAP_REQUIRE_TORCH:-0}" = 1 ]; then
    echo "$name: $OVERLAP_PY cannot run '$import' (tools/venv.sh installs it)" >&2
    exit 1
  fi
  echo "$name: SKIPPED: $OVERLAP_PY cannot run '$import' (tools/venv.sh installs it)"
  exit 0
}
