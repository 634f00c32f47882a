#!/usr/bin/env bash
# Runs the consumer's program on the generated graph and checks what it reports.
set -euo pipefail
out=$("$1" "$2")
echo "$out"
grep -qE "^graph: [0-9]+ nodes, 29 parameters" <<<"$out"
grep -qE "^DDP: [0-9]+ buckets" <<<"$out"
grep -qE "^ZeRO-3: [0-9]+ ops inserted" <<<"$out"
grep -qE "^schedule \(lookahead\): step [0-9.]+ [mu]?s" <<<"$out"
# A bad file is an error naming it, exit status 1.
set +e
err=$("$1" /nonexistent.json 2>&1)
rc=$?
set -e
[ "$rc" = 1 ] || { echo "expected exit 1 on a missing file, got $rc"; exit 1; }
grep -q "nonexistent.json" <<<"$err"
echo "plan_test: ok"
