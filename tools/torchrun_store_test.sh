#!/usr/bin/env bash
# `overlap worker` under torchrun's agent store: PyTorch's own c10d TCPStore (the torch of
# tools/python.sh, served as torchrun's agent serves it) with only the variables torchrun
# gives its workers, and at the end torchrun itself launching them. Two ranks train DDP and ZeRO-3, counted on "init/" as PyTorch's own clients count
# themselves; their keys are where torch.distributed's env://
# rendezvous puts a worker's (PrefixStore "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>"),
# read back through torch's own client; a store secret beside it is a usage error; a store
# that goes away mid-job ends both ranks with an error naming it.
# Skips without torch, as export_test does, unless OVERLAP_REQUIRE_TORCH=1.
set -euo pipefail
overlap=$PWD/tools/overlap
source "$PWD/tools/require_torch.sh"
require_torch torchrun_store_test "import torch.distributed"
py="$OVERLAP_PY"
tmp=${TEST_TMPDIR:-$(mktemp -d)}
cd "$tmp"
# A failed step says which, with what the commands wrote to stderr (only where errexit
# is on: a failure expected under `set +e` is no failure).
trap 'rc=$?; if [[ $- == *e* ]]; then echo "torchrun_store_test: FAILED at line $LINENO (exit $rc)" >&2; for f in *.err; do echo "--- $f" >&2; tail -20 "$f" >&2; done; fi' ERR

# The agent's store: serves until `stop` appears, then checks the workers' keys with torch's
# client and exits 0 only if they are there.
serve() {  # the attempt, and the world its constructor waits for (0: none)
  rm -f port stop
  "$py" - "$1" "${2:-0}" >store.out 2>store.err <<'PY' &
import datetime, os, socket, sys, time
from torch.distributed import PrefixStore, TCPStore
attempt, world = sys.argv[1], int(sys.argv[2])
# world > 0: made as torchrun's static rendezvous makes it (wait_for_workers): the
# constructor returns once `world` clients (itself included) have counted themselves on
# "init/" as PyTorch's clients do. Its port is chosen first, since it returns late (and
# another process may take that port meanwhile); world 0 listens on one the kernel gives.
def publish(port):
    open("port.tmp", "w").write(str(port))
    os.rename("port.tmp", "port")
port = 0
if world > 0:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    publish(port)
store = TCPStore("127.0.0.1", port, world or None, True, timeout=datetime.timedelta(seconds=30),
                 wait_for_workers=world > 0)
if world == 0:
    publish(store.port)
print("store: constructed", flush=True)
while not os.path.exists("stop"):
    time.sleep(0.05)
if open("stop").read().strip() == "check":
    client = TCPStore("127.0.0.1", store.port, None, False,
                      timeout=datetime.timedelta(seconds=5), wait_for_workers=False)
    worker = PrefixStore(f"/worker/attempt_{attempt}", client)
    # get waits (up to the client's 5 s) for a key: the join records, then the verdict.
    for rank in (0, 1):
        assert worker.get(f"join/{rank}").startswith(b"2 "), worker.get(f"join/{rank}")
    assert worker.get("join/verdict") == b"ok", worker.get("join/verdict")
    print("store: the workers' keys are under /worker/attempt_" + attempt)
PY
  store_pid=$!
  for _ in $(seq 300); do [ -e port ] && break; sleep 0.05; done
  port=$(cat port)
}
# Rank r of two as torchrun starts it: rank_env r, then `overlap worker`.
rank_env() {
  echo "RANK=$1 LOCAL_RANK=$1 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1" \
    "MASTER_PORT=$port TORCHELASTIC_USE_AGENT_STORE=True TORCHELASTIC_RESTART_COUNT=3"
}
workers() {  # strategy, then extra variables for both ranks
  local strategy=$1
  shift
  set +e
  env $(rank_env 0) "$@" $overlap worker --strategy "$strategy" --model mlp --steps 3 \
    --timeout 20 >w0.out 2>w0.err &
  local pid0=$!
  env $(rank_env 1) "$@" $overlap worker --strategy "$strategy" --model mlp --steps 3 \
    --timeout 20 >w1.out 2>w1.err
  rc1=$?
  wait $pid0
  rc0=$?
  set -e
}

for strategy in ddp zero3; do
  serve 3
  workers $strategy
  test "$rc0" = 0 && test "$rc1" = 0
  grep -q '^step 3 loss' w0.out
  echo check >stop
  wait $store_pid
  cat store.out
  echo "torchrun_store_test: $strategy under PyTorch's TCPStore ok"
done

# The generation given instead of probed (the store's torch's major version: 1 or 2); a
# server whose constructor waits for the server and both workers to count themselves returns.
wire=$("$py" -c 'import torch; print(torch.__version__.split(".")[0])')
serve 3 3
workers ddp OVERLAP_C10D_WIRE="$wire"
test "$rc0" = 0 && test "$rc1" = 0
echo check >stop
wait $store_pid
grep -q 'store: constructed' store.out

# A secret with PyTorch's store: a usage error naming it, before any connection.
serve 3
set +e
RANK=0 WORLD_SIZE=1 MASTER_PORT=$port TORCHELASTIC_USE_AGENT_STORE=True OVERLAP_STORE_SECRET=x \
  $overlap worker --model mlp --steps 1 >s.out 2>s.err
rc=$?
set -e
test "$rc" = 2
grep -q "PyTorch's c10d TCPStore" s.err

# The store gone mid-job: both ranks end with an error naming it, within the timeout.
serve 3
env $(rank_env 0) $overlap worker --model mlp --steps 1000000 --timeout 20 >g0.out 2>g0.err &
p0=$!
env $(rank_env 1) $overlap worker --model mlp --steps 1000000 --timeout 20 >g1.out 2>g1.err &
p1=$!
for _ in $(seq 600); do grep -q '^step 2 loss' g0.out && break; sleep 0.05; done
echo quit >stop
wait $store_pid || true
start=$(date +%s)
set +e
wait $p0
r0=$?
wait $p1
r1=$?
set -e
test "$r0" != 0 && test "$r1" != 0
# The first rank to see the store gone names it; the other may see that first, or see that
# rank leave first (on a busy machine): either way it ends with an error naming why.
grep -q 'store' g0.err || grep -q 'store' g1.err
for f in g0.err g1.err; do grep -qE 'store|is lost' "$f"; done
echo "torchrun_store_test: the store gone, both ranks ended in $(( $(date +%s) - start )) s:" \
  "$(grep -m1 store g0.err)"
# torchrun itself (torch.distributed.run of the same torch) launching `overlap worker`: its
# agent store, its variables, 2 ranks, DDP and ZeRO-3.
for strategy in ddp zero3; do
  set +e
  timeout 120 "$py" -m torch.distributed.run --standalone --nproc-per-node 2 --no-python \
    $overlap worker --strategy "$strategy" --model mlp --steps 3 --timeout 20 >tr.out 2>tr.err
  r=$?
  set -e
  test "$r" = 0 || { echo "torchrun $strategy: exit $r" >&2; tail -5 tr.err >&2; exit 1; }
  grep -q '^step 3 loss' tr.out
  echo "torchrun_store_test: torchrun launched 2 ranks of $strategy: $(tail -1 tr.out | cut -c1-60)"
done
echo "torchrun_store_test: ok"
