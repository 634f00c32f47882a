#!/usr/bin/env bash
# The multi-process commands end to end: the demo's two ranks, workers named `overlap worker`
# under a launcher that SIGTERM ends, `overlap run` (DDP and ZeRO-3, a trace with a track
# per rank and stream, an injected kill ending in an error naming the lost rank), two
# `overlap worker`s joined as two single-rank "hosts" through the torchrun variables alone
# (rank 0 serving the store), outputs replacing links planted at their paths, the start-up
# check refusing a rank with other flags, and `overlap bench-comm` whose saved model
# `overlap schedule --collective-model` reads.
set -euo pipefail
source "$PWD/tools/python.sh"
overlap=$PWD/tools/overlap
rank_skew=$PWD/tools/rank_skew.py
export OVERLAP_WORKER_BINARY=$overlap
tmp=${TEST_TMPDIR:-$(mktemp -d)}
cd "$tmp"
# A failed step says which, with what the commands wrote to stderr (only where errexit
# is on: a failure expected under `set +e` is no failure).
trap 'rc=$?; if [[ $- == *e* ]]; then echo "run_test: FAILED at line $LINENO (exit $rc)" >&2; for f in *.err; do echo "--- $f" >&2; tail -20 "$f" >&2; done; fi' ERR

# The demo's last step: two ranks, as the README runs it (the binary finds itself: no
# OVERLAP_WORKER_BINARY).
env -u OVERLAP_WORKER_BINARY $overlap demo mlp >demo.out 2>demo.err
grep -q '^\[10\] two ranks' demo.out
grep -q '^step 10 loss' demo.out
# ... whose prediction says which device it is for.
grep -q "predicted step .* on the cost model's device" demo.out

# Workers show as `overlap worker` (their comm, what ps and top print), two children of the
# launcher; SIGTERM to the launcher alone ends the job with 128+15.
$overlap run --nproc 2 --strategy ddp --model mlp --steps 1000000 --timeout 20 >ps.out 2>ps.err &
launcher=$!
named=0
for _ in $(seq 300); do
  named=0
  for p in /proc/[0-9]*; do
    if [ "$(cat "$p/comm" 2>/dev/null)" = "overlap worker" ] &&
      grep -qx "PPid:[[:space:]]*$launcher" "$p/status" 2>/dev/null; then
      named=$((named + 1))
    fi
  done
  [ "$named" -ge 2 ] && break
  sleep 0.1
done
kill -TERM "$launcher"
rc=0
wait "$launcher" || rc=$?
test "$named" = 2
test "$rc" = 143

# run: DDP with a trace.
$overlap run --nproc 2 --strategy ddp --model mlp --steps 3 --trace trace.json >run.out 2>run.err
grep -c '^step [123] loss' run.out | grep -qx 3
grep -q 'hidden communication' run.out
"$OVERLAP_STDLIB_PY" - <<'PY'
import json
events = json.load(open("trace.json"))["traceEvents"]
tracks = {(e["pid"], e["tid"]) for e in events if e["ph"] == "X"}
assert tracks == {(0, 0), (0, 1), (1, 0), (1, 1)}, tracks
print("trace:", len(events), "events on", sorted(tracks))
PY

# run: links planted at the outputs, the trace's per-rank part (FILE.rank<R>) included, are
# replaced, never written through: the file they point at is unchanged.
echo victim >victim.txt
for f in linked.json linked.json.rank0 linked.safetensors; do ln -sfn "$PWD/victim.txt" "$f"; done
$overlap run --nproc 2 --strategy ddp --model mlp --steps 1 --trace linked.json \
  --save linked.safetensors >linked.out 2>linked.err
test "$(cat victim.txt)" = victim
test ! -L linked.json && test ! -L linked.safetensors && test ! -e linked.json.rank0
"$OVERLAP_STDLIB_PY" -c 'import json; json.load(open("linked.json"))'

# run: ZeRO-3 prints each rank's peak beside the simulator's.
$overlap run --nproc 2 --strategy zero3 --model mlp --steps 2 >z.out 2>z.err
grep -q '^step 2 loss' z.out
test "$(grep -c 'peak of graph values .* (simulated' z.err)" = 2

# run: an injected kill; the survivor names the lost rank, the job fails.
if OVERLAP_FAULT=rank=1,step=2,node=mm,action=kill \
    $overlap run --nproc 3 --strategy ddp --model mlp --steps 4 --timeout 20 >k.out 2>k.err; then
  echo "a killed rank must fail the job" >&2
  exit 1
fi
grep -q 'rank 1 is lost' k.err
grep -q 'the job failed' k.err

# run: a graph pair from files, weights and a global batch from files (each rank its rows).
$overlap gen mlp --preset tiny --lifted -o mlp.fwd.json
$overlap gen mlp --preset tiny --backward -o mlp.bwd.json
"$OVERLAP_STDLIB_PY" - <<'PY'
import json, struct
# A global batch of 8 rows for the tiny mlp (x: [8, 8], targets: [8, 4]) in safetensors.
def tensor(rows, cols, seed):
    return [((i * 7 + seed) % 11) / 11.0 - 0.5 for i in range(rows * cols)]
x, t = tensor(8, 8, 1), tensor(8, 4, 2)
header = {"x": {"dtype": "F32", "shape": [8, 8], "data_offsets": [0, 256]},
          "targets": {"dtype": "F32", "shape": [8, 4], "data_offsets": [256, 384]}}
h = json.dumps(header).encode()
with open("batch.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + struct.pack("<96f", *(x + t)))
PY
$overlap run --nproc 2 --strategy zero3 --graph mlp.fwd.json --backward-graph mlp.bwd.json \
  --data batch.safetensors --steps 5 >f.out 2>f.err
grep -q '^step 5 loss' f.out
"$OVERLAP_STDLIB_PY" - <<'PY'
import re
losses = [float(m) for m in re.findall(r"^step \d+ loss ([0-9.]+)", open("f.out").read(), re.M)]
assert len(losses) == 5 and losses[-1] < losses[0], losses  # one batch, memorised
PY

# worker: two "hosts" with only the torchrun variables (rank 0 serves the store). A port
# taken between choosing and binding is retried.
# With "slurm", the same through srun's variables alone (the store's host is the first of
# the node list).
rank_env() {
  if [ "$2" = slurm ]; then
    echo "SLURM_PROCID=$1 SLURM_NTASKS=2 SLURM_LOCALID=$1 SLURM_NODEID=0 SLURM_TASKS_PER_NODE=2(x1) SLURM_JOB_NODELIST=localhost,other[1-3] MASTER_PORT=$port"
  else
    echo "RANK=$1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port"
  fi
}
port_and_run() {
  local flags1=$1 style=${2:-torchrun} attempt
  for attempt in 1 2 3; do
    port=$("$OVERLAP_STDLIB_PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    set +e
    env $(rank_env 0 "$style") \
      $overlap worker --strategy zero3 --model mlp --steps 3 --timeout 20 >w0.out 2>w0.err &
    pid0=$!
    env $(rank_env 1 "$style") \
      $overlap worker --strategy zero3 --model mlp --steps 3 --timeout 20 $flags1 >w1.out 2>w1.err
    rc1=$?
    wait $pid0
    rc0=$?
    set -e
    if ! grep -q 'cannot serve the store' w0.err; then return 0; fi
  done
  echo "no free port in 3 attempts" >&2
  exit 1
}
port_and_run ""
test "$rc0" = 0 && test "$rc1" = 0
grep -q '^step 3 loss' w0.out

port_and_run "" slurm
test "$rc0" = 0 && test "$rc1" = 0
grep -q '^step 3 loss' w0.out

port_and_run "--lr 0.5"
test "$rc0" != 0 && test "$rc1" != 0
grep -q 'rank 1 runs a different program' w0.err
grep -q 'rank 1 runs a different program' w1.err

# bench-comm: the table, and the model file the schedulers read.
$overlap bench-comm --nproc 2 --sizes 4KiB..64KiB --save model.json >b.out
grep -q 'busbw' b.out
grep -q '^fit reduce_scatter' b.out
$overlap gen mlp --preset tiny --lifted -o fwd.json
$overlap schedule fwd.json --collective-model model.json -o sched.json >s.out
echo '{"world_size": 2}' >bad.json
if $overlap schedule fwd.json --collective-model bad.json -o /dev/null 2>bad.err; then
  echo "an incomplete model must be refused" >&2
  exit 1
fi
grep -q 'bad.json' bad.err
# --device cuda: exit 1 saying why (here, without a GPU: no driver or no device; with one,
# what this build lacks), never a crash or a hang.
set +e
$overlap run --device cuda --steps 1 >cuda.out 2>cuda.err
rc=$?
set -e
cat cuda.err
test "$rc" = 1
grep -qE 'no usable GPU|--device cuda:' cuda.err
# The CUDA backend on emulated devices: two ranks, CUDA kernels, Gloo through the host; the
# first loss is the CPU run's (same seed; within 1e-6: other kernels, other summation
# orders), memory is the simulator's.
same_loss() {  # A.out B.out: step 1's losses agree to 1e-6 relative
  awk -v a="$(grep '^step 1 ' "$1" | cut -d' ' -f4)" -v b="$(grep '^step 1 ' "$2" | cut -d' ' -f4)" \
    'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(a != "" && d <= 1e-6 * m) }' ||
    { echo "run_test: step 1 loss $1 vs $2 differ"; exit 1; }
}
$overlap run --device cuda-emulated --steps 2 >emu.out 2>emu.err
cat emu.out emu.err
grep -q '^step 2 loss' emu.out
grep -q 'rank 1: peak of graph values .*+0.0%' emu.err
$overlap run --steps 1 >cpu1.out 2>/dev/null
same_loss emu.out cpu1.out
# ZeRO-3 likewise (shards on the host, gathered onto the emulated devices).
$overlap run --device cuda-emulated --strategy zero3 --steps 2 >emu3.out 2>emu3.err
cat emu3.out emu3.err
grep -q '^step 2 loss' emu3.out
$overlap run --strategy zero3 --steps 1 >cpu3.out 2>/dev/null
same_loss emu3.out cpu3.out
# ZeRO-3's budget from the device's memory by schedule/budget.h's rule, --reserve included;
# plain SGD keeps no optimizer state.
$overlap run --nproc 2 --strategy zero3 --model mlp --steps 2 --device-memory 1GB \
  --reserve 100MB --optimizer sgd --momentum 0 >budget.out 2>budget.err
cat budget.out
grep -q 'budget .*(within)' budget.out budget.err
grep -q 'optimizer 0 B' budget.out budget.err
# A rank does not launch ranks: a worker command that runs the launcher again is refused
# instead of forking without end.
set +e
OVERLAP_LAUNCHER_PID=1 $overlap run --nproc 1 --model mlp --steps 1 >nested.out 2>nested.err
code=$?
set -e
test "$code" = 1
grep -q "a rank does not launch ranks" nested.err
# Every flag is checked once, before any rank starts: one usage text, exit 2.
for threads in 0 5000; do
  set +e
  $overlap run --nproc 8 --model mlp --steps 1 --threads $threads >threads.out 2>threads.err
  code=$?
  set -e
  test "$code" = 2
  test "$(grep -c 'must be an integer from 1 to 4096' threads.err)" = 1
  test "$(grep -c '^usage:' threads.err)" = 1
done
# A weights file is checked once, before any rank starts: an empty one (no tensors) is one
# error naming what is missing, exit 1, and no rank's output.
"$OVERLAP_STDLIB_PY" -c "import struct; open('empty.safetensors','wb').write(struct.pack('<Q', 2) + b'{}')"
set +e
$overlap run --nproc 4 --model mlp --steps 1 --weights empty.safetensors >w.out 2>w.err
code=$?
set -e
test "$code" = 1
test "$(grep -c 'the weights lack' w.err)" = 1
grep -q 'holds no tensors' w.err
if grep -q 'rank' w.err; then echo "run_test: a rank started despite bad weights" >&2; exit 1; fi
echo "run_test: ok"
