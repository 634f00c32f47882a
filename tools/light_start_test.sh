#!/usr/bin/env bash
# Commands that run no kernels start light: the `overlap` binary needs no kernel or
# communication library at load time (OpenMP, oneDNN, OpenBLAS, SLEEF, Gloo), and help,
# gen, inspect, schedule and plan neither load one nor run the program again (the dynamic
# loader's own record, LD_DEBUG=libs: one "initialize program" per exec). The commands that
# compute are handed to overlap_compute with one exec and GOMP_SPINCOUNT set
# (tools/compute_hand_off.h), and a missing overlap_compute is named.
set -euo pipefail
overlap=$PWD/tools/overlap
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
heavy='lib(gomp|dnnl|openblas|sleef|gloo)\.so'

if command -v readelf >/dev/null && readelf -d "$overlap" | grep -E "NEEDED.*$heavy"; then
  fail "the overlap binary links a kernel or communication library at load time"
fi

"$overlap" gen mlp --layers 8 --width 16 --lifted -o "$tmp/f.json"
"$overlap" gen mlp --layers 8 --width 16 --backward -o "$tmp/b.json"
for cmd in "help" "help schedule" "gen gpt2 --preset tiny -o $tmp/g.json" "inspect $tmp/f.json" \
  "schedule $tmp/f.json --algorithm fast_free" "plan $tmp/f.json $tmp/b.json"; do
  rm -f "$tmp"/ld.*
  # shellcheck disable=SC2086
  LD_DEBUG=libs LD_DEBUG_OUTPUT=$tmp/ld "$overlap" $cmd >"$tmp/out" 2>&1 ||
    fail "overlap $cmd failed: $(tail -3 "$tmp/out")"
  if cat "$tmp"/ld.* | grep -E "calling init: .*$heavy"; then
    fail "overlap $cmd loaded a kernel or communication library"
  fi
  execs=$(cat "$tmp"/ld.* | grep -c "initialize program:" || true)
  [ "$execs" = 1 ] || fail "overlap $cmd ran $execs programs (a re-exec)"
done
echo "ok: help, gen, inspect, schedule and plan load no kernel or communication library, one exec each"

# A compute command: one hand-off, GOMP_SPINCOUNT set for libgomp, the kernels loaded there.
rm -f "$tmp"/ld.*
env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY LD_DEBUG=libs LD_DEBUG_OUTPUT=$tmp/ld \
  "$overlap" exec "$tmp/f.json" >"$tmp/out" 2>&1 || fail "exec failed: $(tail -3 "$tmp/out")"
execs=$(cat "$tmp"/ld.* | grep -c "initialize program:" || true)
[ "$execs" = 2 ] || fail "exec ran $execs programs (want overlap, then overlap_compute)"
cat "$tmp"/ld.* | grep -qE "calling init: .*libgomp\.so" || fail "exec did not load the kernels"
GOMP_SPINCOUNT=7 "$overlap" exec "$tmp/f.json" >/dev/null 2>&1 || fail "exec with GOMP_SPINCOUNT"
echo "ok: exec is handed to overlap_compute with one exec"

# Nothing to hand to: named, exit 1.
code=0
OVERLAP_COMPUTE_BINARY=$tmp/none "$overlap" exec "$tmp/f.json" >"$tmp/out" 2>&1 || code=$?
[ "$code" = 1 ] && grep -q "$tmp/none" "$tmp/out" && grep -q "overlap_compute" "$tmp/out" ||
  fail "a missing overlap_compute: exit $code, $(cat "$tmp/out")"
echo "ok: a missing overlap_compute is named"
