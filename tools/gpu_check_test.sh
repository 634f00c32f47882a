#!/usr/bin/env bash
# gpu_check.sh --run on the binaries this build made (from the runfiles, as --build would
# have copied them): the results file's format, and on a machine without a usable GPU every
# GPU stage recorded as skipped with the reason. (--build runs Bazel, so it is checked by
# hand: docs/runtime.md.)
set -euo pipefail
dir=$TEST_TMPDIR/check
mkdir -p "$dir/bin" "$dir/lib"
cp runtime/cuda/cuda_gpu_api_test runtime/cuda/gpu_benchmark tools/overlap tools/overlap_compute \
  runtime/cuda/liboverlap_cuda.so "$dir/bin/"
if tools/gpu_check.sh --run 2>/dev/null; then
  echo "a usage error must not pass" >&2
  exit 1
fi
tools/gpu_check.sh --run "$dir" "$TEST_TMPDIR/out"
results=$TEST_TMPDIR/out/results.txt
cat "$results"
# One line per stage, in this form, in this order.
grep -vqE '^stage [a-z_0-9]+ (pass|fail|skip|timeout) [0-9]+ .+$' "$results" && {
  echo "a malformed results line" >&2
  exit 1
}
test "$(cut -d' ' -f2 "$results" | tr '\n' ' ')" = \
  "probe gpu_tests differential nccl_sweep overlap two_ranks_gloo total "
grep -q '^probe cuda_runtime CUDA 13' "$TEST_TMPDIR/out/probe.log"
grep -q '^probe nccl 2\.' "$TEST_TMPDIR/out/probe.log"
if grep -q '^probe unusable' "$TEST_TMPDIR/out/probe.log"; then
  reason=$(sed -n 's/^probe unusable //p' "$TEST_TMPDIR/out/probe.log")
  for s in gpu_tests differential nccl_sweep overlap two_ranks_gloo; do
    grep -qF "stage $s skip 0 $reason" "$results"
  done
else
  grep -qE '^stage gpu_tests (pass|fail|timeout) ' "$results"
fi
echo "gpu_check_test: ok"
