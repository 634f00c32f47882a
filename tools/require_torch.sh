# Sourced by the tests that need Debian's torch: `require_torch NAME "import ..."` returns
# when /usr/bin/python3 can run the import; otherwise the test fails, saying how to install
# it, when OVERLAP_REQUIRE_TORCH=1 (the test command sets it: tools/bootstrap.sh
# --with-torch installed torch), and skips, saying so, when not.
require_torch() {
  local name=$1 import=$2
  if /usr/bin/python3 -c "$import" 2>/dev/null; then return 0; fi
  if [ "${OVERLAP_REQUIRE_TORCH:-0}" = 1 ]; then
    echo "$name: /usr/bin/python3 cannot run '$import' (tools/bootstrap.sh --with-torch)" >&2
    exit 1
  fi
  echo "$name: SKIPPED: /usr/bin/python3 cannot run '$import'" \
    "(tools/bootstrap.sh --with-torch installs python3-torch)"
  exit 0
}
