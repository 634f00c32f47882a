#!/usr/bin/env bash
# tools/cluster.sh, the cluster on one machine: its links run at their rate (TCP between two
# hosts at 100 Mbit/s), `overlap worker` jobs span its hosts (DDP by torchrun's variables,
# ZeRO-3 by Slurm's), a job stopped by a signal leaves no namespace behind, and a host whose
# link is cut, whose processes are killed or whose rate drops to 8 kbit/s mid-job is named
# by the others within the timeout (at 2 hosts, and at 4 for a cut link and a kill). Skips,
# saying why, where the machine does not allow namespaces (not root, no iproute2).
set -uo pipefail
cluster="$PWD/tools/cluster.sh"
export OVERLAP="$PWD/tools/overlap"
why=$("$cluster" capable)
if [ "$why" != ok ]; then
  echo "cluster_test: skipped: $why"
  exit 0
fi
source "$PWD/tools/python.sh"
prefix="c$(($$ % 1000000))"
trap '"$cluster" down --prefix "$prefix"' EXIT
# Bazel ends a test past its timeout with SIGTERM: exit through the EXIT trap, so the
# namespaces go with it (a stopped run left three on 2026-12-07).
trap 'exit 143' TERM
trap 'exit 130' INT
fail() {
  echo "cluster_test: $*" >&2
  exit 1
}
left() { ip netns list | awk '{print $1}' | grep -c "^${prefix}\(hub\|h[0-9]*\)$"; }

# 1. The link's rate: 24 MiB from host 0 to host 1 over a 100mbit tbf.
"$cluster" up 2 --rate 100mbit --prefix "$prefix" || fail "up failed"
[ "$(left)" = 3 ] || fail "expected a hub and 2 hosts, found $(left) namespaces"
tput='
import socket, sys, time
if sys.argv[1] == "serve":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 5001)); s.listen(1); c, _ = s.accept(); n, t = 0, None
    while True:
        b = c.recv(1 << 20)
        if not b: break
        t = t or time.time(); n += len(b)
    print(n * 8 / (time.time() - t) / 1e6)
else:
    for _ in range(50):
        try:
            c = socket.create_connection((sys.argv[2], 5001)); break
        except OSError: time.sleep(0.1)
    for _ in range(24): c.sendall(b"x" * (1 << 20))
    c.close()
'
out=$(mktemp)
"$cluster" exec --prefix "$prefix" 1 "$OVERLAP_PY" -c "$tput" serve >"$out" &
server=$!
"$cluster" exec --prefix "$prefix" 0 "$OVERLAP_PY" -c "$tput" send "$("$cluster" addr 1)" ||
  fail "sending to host 1 failed"
wait "$server" || fail "the receiver failed"
mbit=$(cat "$out")
echo "cluster_test: 100mbit link: ${mbit} Mbit/s"
"$OVERLAP_PY" -c "import sys; r = float(sys.argv[1]); sys.exit(0 if 60 <= r <= 105 else 1)" "$mbit" ||
  fail "a 100mbit link carried $mbit Mbit/s"
"$cluster" down --prefix "$prefix"
[ "$(left)" = 0 ] || fail "down left $(left) namespaces"

# 2. DDP across 2 hosts (torchrun's variables), ZeRO-3 across 2 (Slurm's).
log=$(mktemp)
"$cluster" job 2 --rate 1gbit --prefix "$prefix" -- --model mlp --steps 3 --timeout 30 >"$log" 2>&1 ||
  fail "DDP job failed: $(tail -5 "$log")"
[ "$(grep -c 'peak of graph values' "$log")" = 2 ] || fail "DDP: not both hosts finished: $(cat "$log")"
"$cluster" job 2 --rate 1gbit --prefix "$prefix" --slurm -- --strategy zero3 --model gpt2 \
  --steps 2 --timeout 30 >"$log" 2>&1 || fail "ZeRO-3 job (Slurm variables) failed: $(tail -5 "$log")"
grep -q "10.77.0.2.*peak of graph values" "$log" || fail "ZeRO-3: host 1 did not finish: $(cat "$log")"
[ "$(left)" = 0 ] || fail "a job left $(left) namespaces"

# 3. A job stopped by SIGTERM mid-run leaves nothing behind.
"$cluster" job 2 --rate 1mbit --prefix "$prefix" -- --model gpt2 --steps 1000 >"$log" 2>&1 &
job=$!
sleep 3
kill -TERM "$job"
wait "$job"
[ "$(left)" = 0 ] || fail "SIGTERM left $(left) namespaces"
# Waits for rank 0's step 3 (its output as it runs) on $hosts hosts, applies fault $1 (a
# command) to host $victim, and checks that the job ends within the timeout with host 0
# naming the victim's rank and its host, leaving no namespace.
hosts=2
victim=1
fault() {
  local what=$1 live
  shift
  live=$(mktemp -d)
  OVERLAP_CLUSTER_LOGS="$live" "$cluster" job "$hosts" --rate 1gbit --prefix "$prefix" -- \
    --model gpt2 --steps 100000 --timeout 10 >"$log" 2>&1 &
  job=$!
  for _ in $(seq 300); do  # rank 0's step 3, as it runs (at most 60 s)
    grep -q "^step 3 " "$live/rank0.log" 2>/dev/null && break
    sleep 0.2
  done
  grep -q "^step 3 " "$live/rank0.log" || fail "$what: the job did not reach step 3 in 60 s"
  "$@" || fail "$what: could not apply it"
  start=$(date +%s)
  wait "$job" && fail "the job survived $what"
  rm -rf "$live"
  took=$(($(date +%s) - start))
  [ "$took" -le 40 ] || fail "$what: the job took ${took} s to end (timeout 10 s)"
  grep -q "^\[host 0 [0-9.]*\] .*rank $victim is lost (on $("$cluster" addr "$victim");" "$log" ||
    fail "$what: host 0 did not name the lost rank and host: $(grep 'overlap: error' "$log")"
  [ "$(left)" = 0 ] || fail "$what: the job left $(left) namespaces"
  echo "cluster_test: $what: the job ended ${took} s after, naming rank $victim on" \
    "$("$cluster" addr "$victim")"
}
# 4. Host 1's link cut mid-job: both ranks end within the timeout, host 0 naming the lost
# rank and its host.
cut_link() { ip -n "${prefix}h$victim" link set eth0 down; }
fault "link cut" cut_link
# 5. Host 1's processes killed (SIGKILL: no goodbye on the wire).
kill_host() { ip netns pids "${prefix}h$victim" | xargs -r kill -KILL; }
fault "host 1's processes killed" kill_host
# 6. Host 1's link rate dropped to 8 kbit/s both ways (a collective's megabytes now take
# hours, and the heartbeats queue behind them).
slow_host() { "$cluster" rate --prefix "$prefix" "$victim" 8kbit; }
fault "host 1's rate dropped to 8kbit" slow_host
# 7. Four hosts, a host in the middle of the ring lost: its link cut, its processes killed.
hosts=4
victim=2
fault "host 2 of 4's link cut" cut_link
fault "host 2 of 4's processes killed" kill_host
echo "cluster_test: ok"
