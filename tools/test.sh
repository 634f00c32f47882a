#!/usr/bin/env bash
# The README's second command, and all that .ci/run does: installs what is missing, then
# runs the whole test suite (`bazel test //...`: unit tests, RapidCheck properties, fuzz
# corpus replays, the CLI end to end) and closes with one line "overlap: N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
tools/bootstrap.sh || exit 1

log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
bazel test --test_summary=short //... 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log" || true)
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FLAKY|INCOMPLETE)' "$log" || true)
echo "suite took $(( $(date +%s) - start )) s"
if [ "$rc" != 0 ] && [ "$failed" = 0 ]; then failed=1; fi  # a build failure fails the run
echo "overlap: $passed passed, $failed failed"
exit "$rc"
