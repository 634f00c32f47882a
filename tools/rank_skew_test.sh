#!/usr/bin/env bash
# tools/rank_skew.py on traces made by hand, where every figure is known: rank 1 starts one
# allgather 5 ms after rank 0 (rank 0 waits 5 ms of its 7), one reduce-scatter 0.04 ms
# after (too little to count as late), and rank 0 starts another 2 ms late; a collective
# only one part holds is left out. Then its errors.
set -euo pipefail
source "$PWD/tools/python.sh"
tool=$PWD/tools/rank_skew.py
tmp=${TEST_TMPDIR:-$(mktemp -d)}
cd "$tmp"
trap 'echo "rank_skew_test: FAILED at line $LINENO" >&2' ERR

# Worker parts: one event per line, comma-separated, as `overlap worker --trace` writes.
cat >t.json.rank0 <<'T'
{"ph":"M","pid":0,"name":"process_name","args":{"name":"rank 0"}},
{"ph":"X","pid":0,"tid":0,"name":"mm","ts":1000,"dur":500},
{"ph":"X","pid":0,"tid":1,"name":"allgather #1 (stream 0, 4096 bytes, rank 0 of 2)","ts":10000,"dur":7000},
{"ph":"X","pid":0,"tid":1,"name":"reduce_scatter #2 (stream 0, 4096 bytes, rank 0 of 2)","ts":20000,"dur":1000},
{"ph":"X","pid":0,"tid":1,"name":"allgather #3 (stream 0, 8192 bytes, rank 0 of 2)","ts":32000,"dur":1000},
{"ph":"X","pid":0,"tid":1,"name":"allgather #4 (stream 0, 8192 bytes, rank 0 of 2)","ts":40000,"dur":1000}
T
cat >t.json.rank1 <<'T'
{"ph":"X","pid":1,"tid":1,"name":"allgather #1 (stream 0, 4096 bytes, rank 1 of 2)","ts":15000,"dur":2000},
{"ph":"X","pid":1,"tid":1,"name":"reduce_scatter #2 (stream 0, 4096 bytes, rank 1 of 2)","ts":20040,"dur":1000},
{"ph":"X","pid":1,"tid":1,"name":"allgather #3 (stream 0, 8192 bytes, rank 1 of 2)","ts":30000,"dur":3000}
T
"$OVERLAP_STDLIB_PY" "$tool" t.json.rank0 t.json.rank1 --top 2 >parts.out
cat parts.out
grep -q '^3 collectives on 2 ranks; 7.0 ms of 15.0 ms of collective time (46.9%)' parts.out
grep -Eq '^ +0 +5\.0 ms +9\.0 ms +1$' parts.out
grep -Eq '^ +1 +2\.0 ms +6\.0 ms +1$' parts.out
grep -q '^  allgather #1 (stream 0, 4096 bytes): 5.00 ms, rank 1 last$' parts.out
grep -q '^  allgather #3 (stream 0, 8192 bytes): 2.00 ms, rank 0 last$' parts.out

# The same events as one trace (what `overlap run --trace` writes): the same report.
"$OVERLAP_STDLIB_PY" - <<'PY'
import json
events = []
for part in ("t.json.rank0", "t.json.rank1"):
    events += json.loads("[" + open(part).read().strip().rstrip(",") + "]")
json.dump({"displayTimeUnit": "ms", "traceEvents": events}, open("whole.json", "w"))
PY
"$OVERLAP_STDLIB_PY" "$tool" whole.json --top 2 >whole.out
cmp parts.out whole.out

# Errors: exit 2 saying why.
echo 'not json' >bad.json
rc=0; "$OVERLAP_STDLIB_PY" "$tool" bad.json 2>bad.err || rc=$?
test "$rc" = 2 && grep -q 'bad.json: not a trace' bad.err
rc=0; "$OVERLAP_STDLIB_PY" "$tool" t.json.rank1 2>one.err || rc=$?
test "$rc" = 2 && grep -q 'no collective appears on all 2 ranks' one.err
rc=0; "$OVERLAP_STDLIB_PY" "$tool" missing.json 2>missing.err || rc=$?
test "$rc" = 2 && grep -q 'missing.json' missing.err
# The same part twice: refused, naming the collective.
rc=0; "$OVERLAP_STDLIB_PY" "$tool" t.json.rank0 t.json.rank0 t.json.rank1 2>twice.err || rc=$?
test "$rc" = 2 && grep -q 'allgather #1 (stream 0, 4096 bytes, rank 0 of 2) appears twice' twice.err
# A part cut mid-line (a killed worker): read up to the cut, the torn event left out.
head -c -40 t.json.rank1 >cut.json.rank1
"$OVERLAP_STDLIB_PY" "$tool" t.json.rank0 cut.json.rank1 >cut.out
grep -q '^2 collectives on 2 ranks; ' cut.out
echo "rank_skew_test: passed"
