#!/usr/bin/env bash
# The CUDA backend loads only for --device cuda: the overlap binary needs no CUDA library to
# start, CPU commands (and the emulated device) run with CUDA's libraries hidden, and
# --device cuda opens liboverlap_cuda.so from the binary's runfiles, or says why it cannot.
set -euo pipefail
overlap=$PWD/tools/overlap
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
cuda_libs='lib(cudart|cublas|cublasLt|cudnn|nccl|cuda)\.so'

# 1. Nothing of CUDA's among the libraries the binary needs at load time.
if command -v readelf >/dev/null; then
  if readelf -d "$overlap" | grep -E "NEEDED.*$cuda_libs"; then
    fail "the overlap binary links CUDA libraries at load time"
  fi
fi

# 2. help, schedule and a CPU run load none (the dynamic loader's own record).
"$overlap" gen mlp --layers 64 --width 16 --lifted -o "$tmp/chain.json"
for cmd in "help" "schedule $tmp/chain.json --algorithm fast_free" \
           "run --nproc 1 --strategy zero3 --model mlp --steps 1"; do
  # shellcheck disable=SC2086
  rm -f "$tmp"/ld.*
  LD_DEBUG=libs LD_DEBUG_OUTPUT=$tmp/ld "$overlap" $cmd >"$tmp/out" 2>&1 ||
    fail "overlap $cmd failed: $(tail -3 "$tmp/out")"
  if cat "$tmp"/ld.* | grep -E "calling init: .*$cuda_libs"; then
    fail "overlap $cmd loaded a CUDA library"
  fi
done
echo "ok: help, schedule and a CPU run load no CUDA library"

# 3. --device cuda opens the plugin (and CUDA's libraries) from the runfiles; on a machine
#    without a GPU it then names what is missing.
code=0
rm -f "$tmp"/ld.*
LD_DEBUG=libs LD_DEBUG_OUTPUT=$tmp/ld "$overlap" run --nproc 1 --device cuda --model mlp \
  --steps 1 >"$tmp/out" 2>&1 || code=$?
cat "$tmp"/ld.* >"$tmp/libs"
grep -q "calling init: .*liboverlap_cuda.so" "$tmp/libs" || fail "--device cuda did not open the plugin"
grep -qE "calling init: .*libcudart\.so" "$tmp/libs" || fail "the plugin did not bring CUDA's runtime"
if [ "$code" != 0 ]; then
  grep -q "GPU\|driver\|CUDA" "$tmp/out" || fail "--device cuda failed without saying why: $(cat "$tmp/out")"
  echo "ok: --device cuda opened the plugin; here: $(grep -m1 error "$tmp/out")"
fi

# 4. A plugin that is not there, or not ours, is named.
code=0
OVERLAP_CUDA_PLUGIN=$tmp/none.so "$overlap" run --nproc 1 --device cuda --steps 1 >"$tmp/out" 2>&1 || code=$?
[ "$code" = 1 ] && grep -q "$tmp/none.so" "$tmp/out" || fail "a missing plugin: exit $code, $(cat "$tmp/out")"
other=$(ldd "$overlap" | awk '/libm\.so/ {print $3}')
code=0
OVERLAP_CUDA_PLUGIN=$other "$overlap" run --nproc 1 --device cuda --steps 1 >"$tmp/out" 2>&1 || code=$?
[ "$code" = 1 ] && grep -q "not overlap's CUDA plugin" "$tmp/out" || fail "a foreign plugin: exit $code, $(cat "$tmp/out")"
echo "ok: a missing or foreign plugin is refused by name"

# 4b. A FIFO is refused at once (never opened, so never waited on); a bare file name is the
#     file in the working folder, never one found on the library path.
mkfifo "$tmp/fifo.so"
code=0
OVERLAP_CUDA_PLUGIN=$tmp/fifo.so timeout 20 "$overlap" run --nproc 1 --device cuda --steps 1 >"$tmp/out" 2>&1 || code=$?
[ "$code" = 1 ] && grep -q "not a regular file" "$tmp/out" || fail "a FIFO plugin: exit $code, $(cat "$tmp/out")"
code=0
(cd "$tmp" && OVERLAP_CUDA_PLUGIN=libm.so.6 "$overlap" run --nproc 1 --device cuda --steps 1 >"$tmp/out" 2>&1) || code=$?
[ "$code" = 1 ] && grep -q "libm.so.6" "$tmp/out" && ! grep -q "not overlap's CUDA plugin" "$tmp/out" ||
  fail "a bare name not in the working folder was loaded from the library path: exit $code, $(cat "$tmp/out")"
cp "$other" "$tmp/libm.so.6"
code=0
(cd "$tmp" && OVERLAP_CUDA_PLUGIN=libm.so.6 "$overlap" run --nproc 1 --device cuda --steps 1 >"$tmp/out" 2>&1) || code=$?
[ "$code" = 1 ] && grep -q "$tmp/libm.so.6 is not overlap's CUDA plugin" "$tmp/out" ||
  fail "a bare name in the working folder: exit $code, $(cat "$tmp/out")"
echo "ok: a FIFO is refused; a bare name is the working folder's file"

# 5. With CUDA's libraries hidden (an empty folder mounted over them, where this process may
#    make a mount namespace): the CPU commands and the emulated device still run.
lib=/usr/local/cuda/lib64
if [ -d "$lib" ] && unshare -m true 2>/dev/null; then
  unshare -m bash -c "
    set -e
    mount -t tmpfs none '$lib'
    [ -z \"\$(ls '$lib')\" ]
    '$overlap' help >/dev/null
    '$overlap' schedule '$tmp/chain.json' --algorithm fast_free >/dev/null
    '$overlap' run --nproc 2 --strategy ddp --model mlp --steps 2 >/dev/null 2>&1
    '$overlap' run --nproc 1 --strategy zero3 --model mlp --steps 2 --device cuda-emulated >/dev/null 2>&1
    code=0
    '$overlap' run --nproc 1 --device cuda --steps 1 >'$tmp/out' 2>&1 || code=\$?
    [ \$code = 1 ] && grep -q 'needs CUDA 13' '$tmp/out'
  " || fail "with CUDA's libraries hidden: $(cat "$tmp/out" 2>/dev/null)"
  echo "ok: with $lib hidden, help, schedule, DDP and the emulated device ran; --device cuda: $(grep -m1 error "$tmp/out")"
else
  echo "skip: no mount namespace here (unshare -m), so CUDA's libraries were not hidden"
fi
