#!/usr/bin/env bash
# A cluster on one machine: N hosts, each a network namespace with one interface on a shared
# bridge (in a namespace of its own), every link limited to a rate by tbf in both
# directions. Traffic stays on addresses inside these namespaces (10.77.0.0/24); nothing
# touches the machine's own interfaces. Needs root (ip netns, veth, tc).
#
#   tools/cluster.sh up N [--rate R] [--prefix P]    create hosts P0..P(N-1) (default
#                                                      prefix ovc, rate 1gbit: tc's units)
#   tools/cluster.sh exec [--prefix P] I CMD...        run CMD on host I
#   tools/cluster.sh addr I                            host I's address (10.77.0.(I+1))
#   tools/cluster.sh rate I R [--prefix P]             host I's link limited to R both ways
#                                                      (mid-job too: a slowed host)
#   tools/cluster.sh down [--prefix P]                 delete every namespace of prefix P
#   tools/cluster.sh job N [--rate R] [--prefix P] [--slurm] [--run CMD] -- OVERLAP_ARGS...
#       up, one `overlap CMD OVERLAP_ARGS` per host (CMD worker by default, or bench-comm
#       --as-rank; rank I on host I; MASTER_ADDR host 0, the store's secret from a file;
#       --slurm: Slurm's variables instead of torchrun's), wait for all, down (also on
#       failure or a signal). Exits with the first failing rank's status. $OVERLAP names
#       the binary (default: overlap on PATH); $OVERLAP_CLUSTER_LOGS, a folder for each
#       rank's output while it runs (rank<I>.log).
#
# A kill -9 leaves the namespaces behind; the next `up` or `down` of the prefix removes
# them. docs/runtime.md, "A cluster on one machine", says how the links behave.
set -uo pipefail

die() {
  echo "cluster: $*" >&2
  exit 1
}

addr() { echo "10.77.0.$(($1 + 1))"; }

# Whether this machine lets us make namespaces: "ok", or the reason it does not.
capable() {
  [ "$(id -u)" = 0 ] || {
    echo "not root"
    return
  }
  command -v ip >/dev/null && command -v tc >/dev/null || {
    echo "iproute2 (ip, tc) missing"
    return
  }
  local probe="ovcprobe$$"
  if ! out=$(ip netns add "$probe" 2>&1); then
    echo "ip netns add refused: $out"
    return
  fi
  ip netns del "$probe" 2>/dev/null
  echo ok
}

down() {
  local prefix="$1" ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}(hub|h[0-9]+)$"); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
}

# tbf on dev (in namespace ns) at rate: a burst of a few milliseconds at that rate, a queue
# of at most 50 ms (netem delay is not available on the project's machines).
limit() {
  local ns="$1" dev="$2" rate="$3"
  ip netns exec "$ns" tc qdisc replace dev "$dev" root tbf rate "$rate" burst 256kb \
    latency 50ms || return 1
}

up() {
  local n="$1" rate="$2" prefix="$3" i host
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 250 ] || die "N must be 1 to 250, not '$n'"
  local why
  why=$(capable)
  [ "$why" = ok ] || die "this machine does not allow a cluster of namespaces: $why"
  down "$prefix"
  ip netns add "${prefix}hub" || return 1
  ip -n "${prefix}hub" link add br0 type bridge || return 1
  ip -n "${prefix}hub" link set br0 up || return 1
  ip -n "${prefix}hub" link set lo up || return 1
  for ((i = 0; i < n; i++)); do
    host="${prefix}h$i"
    ip netns add "$host" || return 1
    ip link add "ovc$$x$i" type veth peer name "ovc$$y$i" || return 1
    ip link set "ovc$$x$i" netns "$host" name eth0 || return 1
    ip link set "ovc$$y$i" netns "${prefix}hub" name "p$i" || return 1
    ip -n "$host" addr add "$(addr "$i")/24" dev eth0 || return 1
    ip -n "$host" link set eth0 up || return 1
    ip -n "$host" link set lo up || return 1
    ip -n "${prefix}hub" link set "p$i" master br0 up || return 1
    limit "$host" eth0 "$rate" || return 1          # host -> bridge
    limit "${prefix}hub" "p$i" "$rate" || return 1  # bridge -> host
  done
}

job() {
  local n="$1" rate="$2" prefix="$3" slurm="$4" run="$5"
  shift 5
  local overlap="${OVERLAP:-overlap}" pids=() i rc=0 r
  work=$(mktemp -d)  # global: the EXIT trap reads it after job returns
  trap 'down "$prefix"; rm -rf "$work"' EXIT
  trap 'exit 130' INT TERM
  up "$n" "$rate" "$prefix" || die "could not create the cluster"
  # Each rank's output as it runs: OVERLAP_CLUSTER_LOGS/rank<I>.log when set (a caller
  # watching a job's progress), else a temporary folder; printed after the job either way.
  local logs="${OVERLAP_CLUSTER_LOGS:-$work}"
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/secret"
  chmod 600 "$work/secret"
  for ((i = 0; i < n; i++)); do
    local vars=(OVERLAP_STORE_SECRET_FILE="$work/secret" MASTER_ADDR="$(addr 0)"
      MASTER_PORT=29500)
    if [ "$slurm" = 1 ]; then
      vars+=(SLURM_PROCID="$i" SLURM_NTASKS="$n" SLURM_LOCALID=0 SLURM_NODEID="$i"
        SLURM_TASKS_PER_NODE="1(x$n)" SLURM_JOB_NODELIST="$(addr 0)")
    else
      vars+=(RANK="$i" WORLD_SIZE="$n" LOCAL_RANK=0 LOCAL_WORLD_SIZE=1)
    fi
    # shellcheck disable=SC2086 # run: a subcommand and its own switch
    ip netns exec "${prefix}h$i" env "${vars[@]}" "$overlap" $run "$@" \
      >"$logs/rank$i.log" 2>&1 &
    pids+=($!)
  done
  for ((i = 0; i < n; i++)); do
    wait "${pids[$i]}"
    r=$?
    if [ "$r" != 0 ] && [ "$rc" = 0 ]; then rc=$r; fi
    sed "s/^/[host $i $(addr "$i")] /" "$logs/rank$i.log"
  done
  return "$rc"
}

cmd="${1:-}"
shift || true
if [ "$cmd" = exec ]; then  # exec [--prefix P] I CMD...: CMD's own flags are its own
  prefix=ovc
  if [ "${1:-}" = --prefix ]; then prefix="$2"; shift 2; fi
  [ $# -ge 2 ] || die "exec: a host index, then the command"
  i="$1"
  shift
  exec ip netns exec "${prefix}h$i" "$@"
fi
rate=1gbit
prefix=ovc
slurm=0
run=worker
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate="$2"; shift 2 ;;
    --prefix) prefix="$2"; shift 2 ;;
    --slurm) slurm=1; shift ;;
    --run)
      case "$2" in
        worker) run=worker ;;
        bench-comm) run="bench-comm --as-rank" ;;
        *) die "--run: worker or bench-comm, not '$2'" ;;
      esac
      shift 2
      ;;
    --) shift; break ;;
    *) args+=("$1"); shift ;;
  esac
done
[[ "$prefix" =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "--prefix: 1-8 lowercase letters and digits, not '$prefix'"
case "$cmd" in
  capable) capable ;;
  up) up "${args[0]:-2}" "$rate" "$prefix" || { down "$prefix"; die "could not create the cluster"; } ;;
  down) down "$prefix" ;;
  addr) addr "${args[0]:?host index}" ;;
  rate)
    host="${args[0]:?host index}"
    r="${args[1]:?rate (tc units: 8kbit, 100mbit)}"
    limit "${prefix}h$host" eth0 "$r" && limit "${prefix}hub" "p$host" "$r" ||
      die "could not limit host $host of prefix $prefix to $r"
    ;;
  job) job "${args[0]:-2}" "$rate" "$prefix" "$slurm" "$run" "$@" ;;
  *)
    sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
