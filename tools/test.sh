#!/usr/bin/env bash
# The README's second command: installs what is missing, then runs the whole test suite and
# closes with one line "overlap: N passed, N failed". Under 25 minutes cold on the project's
# 2-core machines.
#
#   0. tools/check_format.py                 C++ formatted (clang-format), BUILD deps sorted,
#                                            no function over 120 lines outside tests
#   1. bazel test //...                      unit tests, RapidCheck properties (1,000 cases
#      (all but tag zoo)                     each), fuzz corpus replays, the CLI end to end,
#                                            the exporter and the torchrun store against torch
#
# `tools/test.sh --deep` runs the deep checks instead, which .ci/run adds after the suite
# (each rebuilds everything, so together they take longer than the suite):
#
#   1b. bazel test <tag zoo>                 the model zoo's campaigns against torch
#                                            (//tools:zoo_test, op_zoo_test, zoo_export_test)
#   2. bazel test --config=asan-ubsan //...  the same suite under ASan + UBSan
#   2b. bazel test --config=tsan <runtime's multi-process tests>   under ThreadSanitizer
#   3. tools/check_consumer.sh               examples/consumer/, a workspace of its own using
#                                            overlap as a library, in place and copied outside
#   4. tools/check_oss_fuzz.sh               .clusterfuzzlite/build.sh run as OSS-Fuzz runs it:
#                                            fuzzers, seed corpora, dictionaries, static
#                                            Abseil, 1,000 runs each
#   5. tools/fuzz.sh --seconds 30 --no-merge a 30-second libFuzzer smoke run of every target,
#      --bin <those fuzzers>                 with the binaries stage 4 built
#
#   tools/test.sh [--deep]
#
# Any failing test, sanitizer report or fuzzer finding fails the run.
set -uo pipefail
cd "$(dirname "$0")/.."
deep=0
case "${1:-}" in
  --deep) deep=1 ;;
  --quick | "") ;;  # --quick: the suite, as before the deep checks moved out
  *)
    echo "usage: tools/test.sh [--deep]" >&2
    exit 2
    ;;
esac
tools/bootstrap.sh --with-torch || exit 1

log=$(mktemp)
trap 'rm -f "$log"' EXIT
passed=0
failed=0
rc=0
timings=()
t0=$(date +%s)

# Runs `bazel test` with the given flags (and targets; default //...) and adds its targets
# to the counts.
suite() {
  local name="$1" start
  shift
  start=$(date +%s)
  echo "== overlap: $name"
  local targets=("//...")
  for a in "$@"; do [[ "$a" == //* ]] && targets=(); done
  bazel test --test_summary=short "$@" "${targets[@]}" 2>&1 | tee "$log"
  local r=${PIPESTATUS[0]}
  local p f
  p=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log" || true)
  f=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FLAKY|INCOMPLETE)' "$log" || true)
  if [ "$r" != 0 ] && [ "$f" = 0 ]; then f=1; fi  # a build failure fails the run
  passed=$((passed + p))
  failed=$((failed + f))
  [ "$r" != 0 ] && rc=1
  timings+=("$(printf '%-28s %5d s  %s passed, %s failed' "$name" $(( $(date +%s) - start )) "$p" "$f")")
}

# Runs "$@" as one stage named $1 that counts as one passed or failed check.
stage() {
  local name="$1" start r
  shift
  start=$(date +%s)
  echo "== overlap: $name"
  "$@"
  r=$?
  if [ "$r" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); rc=1; fi
  timings+=("$(printf '%-28s %5d s  %s' "$name" $(( $(date +%s) - start )) \
    "$([ "$r" = 0 ] && echo "1 passed" || echo "1 failed")")")
}

if ((!deep)); then
  start=$(date +%s)
  echo "== overlap: format"
  if tools/check_format.py; then passed=$((passed + 1)); else failed=$((failed + 1)); rc=1; fi
  timings+=("$(printf '%-28s %5d s' "format" $(( $(date +%s) - start )))")

  # The exporter's tests must find torch here (bootstrap installed it), not skip. The model
  # zoo's campaigns (tag zoo) are deep checks: they alone took 10 of a cold run's 30 minutes.
  suite "unit + property + corpus" --test_env=OVERLAP_REQUIRE_TORCH=1 --test_tag_filters=-zoo
else
  # The model zoo's campaigns against torch: transformers, timm and torchvision families,
  # torch.export's capture, one model per operator class.
  suite "model zoo (torch)" --test_env=OVERLAP_REQUIRE_TORCH=1 --build_tests_only \
    --test_tag_filters=zoo
  # Tests only: the benchmarks and tools no test runs are not built again under sanitizers.
  # The exporter's test (tag torch) runs once, above: under sanitizers it would only export
  # the same models again.
  suite "ASan + UBSan" --config=asan-ubsan --build_tests_only --test_tag_filters=-torch
  # The multi-process tests under ThreadSanitizer: communication threads, the watchdog, the
  # store. OpenBLAS runs one thread here: its workers hand results back through spin flags
  # TSan cannot see (uninstrumented), which it would report as races on every sgemm.
  suite "TSan (runtime, ranks)" --config=tsan --build_tests_only --test_env=OPENBLAS_NUM_THREADS=1 \
    --test_env=OMP_NUM_THREADS=1 \
    --test_env=TSAN_OPTIONS="suppressions=$PWD/tools/tsan.supp halt_on_error=1" \
    //runtime:gloo_communicator_test //runtime:store_server_test //runtime:tcp_store_test \
    //runtime:ddp_test \
    //runtime:zero3_test //runtime:job_test //runtime/cuda:nccl_communicator_test \
    //runtime/cuda:gpu_replay_test
  stage "consumer workspace" tools/check_consumer.sh
  fuzzers=$(mktemp -d)
  trap 'rm -f "$log"; rm -rf "$fuzzers"' EXIT
  stage "fuzzers, OSS-Fuzz build" tools/check_oss_fuzz.sh --out "$fuzzers"
  start=$(date +%s)
  # Two targets at a time (the machines have 2 cores; each fuzzer is one process), so the
  # smoke run takes half the wall time. Each half prints its own table.
  echo "== overlap: fuzz smoke (30 s per target, two at a time)"
  mapfile -t targets < <(ls fuzz/corpus)
  half=$(( (${#targets[@]} + 1) / 2 ))
  log2=$(mktemp)
  tools/fuzz.sh --seconds 30 --no-merge --bin "$fuzzers" "${targets[@]:0:half}" >"$log" 2>&1 &
  pid1=$!
  tools/fuzz.sh --seconds 30 --no-merge --bin "$fuzzers" "${targets[@]:half}" >"$log2" 2>&1 &
  pid2=$!
  r=0
  wait "$pid1" || r=1
  wait "$pid2" || r=1
  cat "$log2" >>"$log"
  rm -f "$log2"
  cat "$log"
  p=$(grep -cE '_fuzzer +[0-9]+ +[0-9]+ +[0-9?]+ +0$' "$log" || true)
  f=$(grep -cE '_fuzzer +[0-9]+ +[0-9]+ +[0-9?]+ +[1-9][0-9]*$' "$log" || true)
  if [ "$r" != 0 ] && [ "$f" = 0 ]; then f=1; fi
  passed=$((passed + p))
  failed=$((failed + f))
  [ "$r" != 0 ] && rc=1
  timings+=("$(printf '%-28s %5d s  %s passed, %s failed' "fuzz smoke" $(( $(date +%s) - start )) "$p" "$f")")
fi

echo
printf '%s\n' "${timings[@]}"
echo "suite took $(( $(date +%s) - t0 )) s"
echo "overlap: $passed passed, $failed failed"
exit "$rc"
