#!/usr/bin/env bash
# Fuzzing campaign: builds the fuzz targets with --config=fuzz (clang, libFuzzer, ASan,
# UBSan), runs each for M minutes on a scratch copy of its corpus, merges what found new
# coverage back into fuzz/corpus/<target>/ (minimised with -merge=1), and prints a table.
#
#   tools/fuzz.sh [--minutes M | --seconds S] [--jobs J] [--no-merge] [--bin DIR] [target ...]
#
# Default: every target (one per fuzz/corpus/ folder), 1 minute each, 1 job. --no-merge
# leaves the corpus as it is (CI's smoke run). --bin DIR runs the fuzzers already in DIR
# (what .clusterfuzzlite/build.sh wrote, e.g. by tools/check_oss_fuzz.sh --out DIR) instead
# of building them with Bazel. Progress lines (libFuzzer's pulses) stream while a target
# runs. Exit status 1 when anything was found.
#
# A crash leaves its input as fuzz/findings/<target>/crash-*; reproduce it with
#   bazel-bin/fuzz/<target>_fuzzer fuzz/findings/<target>/crash-...   (after --config=fuzz)
#   DIR/<target>_fuzzer fuzz/findings/<target>/crash-...                (with --bin DIR)
#   bazel run //fuzz:<target>_fuzzer -- $PWD/fuzz/findings/<target>/crash-...   (plain build)
# fix it, and copy the file into fuzz/corpus/<target>/ so `bazel test` keeps it fixed.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
jobs=1
merge=1
prebuilt=""
targets=()
while (($#)); do
  case "$1" in
    --minutes) seconds=$(($2 * 60)); shift 2 ;;
    --minutes=*) seconds=$((${1#*=} * 60)); shift ;;
    --seconds) seconds="$2"; shift 2 ;;
    --seconds=*) seconds="${1#*=}"; shift ;;
    --jobs) jobs="$2"; shift 2 ;;
    --jobs=*) jobs="${1#*=}"; shift ;;
    --no-merge) merge=0; shift ;;
    --bin) prebuilt="$2"; shift 2 ;;
    --bin=*) prebuilt="${1#*=}"; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("${1%_fuzzer}_fuzzer"); shift ;;
  esac
done
if ((${#targets[@]} == 0)); then
  mapfile -t targets < <(ls fuzz/corpus)
  targets=("${targets[@]/%/_fuzzer}")
fi

root=$PWD
# OSS-Fuzz's builds add unsigned-integer-overflow as a recoverable check, silenced at run time.
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:silence_unsigned_overflow=1}"
if [ -n "$prebuilt" ]; then
  bin=$(cd "$prebuilt" && pwd)
  for t in "${targets[@]}"; do
    [ -x "$bin/$t" ] || { echo "fuzz.sh: no $t in $prebuilt" >&2; exit 2; }
  done
else
  tools/bootstrap.sh >/dev/null
  bazel build --config=fuzz "${targets[@]/#///fuzz:}"
  bin=$(bazel info --config=fuzz bazel-bin 2>/dev/null)/fuzz
fi

summary=()
found=0
for t in "${targets[@]}"; do
  name="${t%_fuzzer}"
  corpus="fuzz/corpus/$name"
  work=$(mktemp -d)
  findings="fuzz/findings/$name"
  mkdir -p "$findings"
  par=()
  if ((jobs > 1)); then par=(-jobs="$jobs" -workers="$jobs"); fi
  dict=()
  [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
  echo "== $t: ${seconds} s, $jobs job(s), corpus $corpus ($(ls "$corpus" | wc -l) files)"
  start=$(date +%s)
  set +e
  # The scratch folder gets the new inputs; the corpus is read only (merged afterwards).
  (cd "$work" && "$bin/$t" "$work" "$root/$corpus" "${dict[@]/=/=$root/}" \
      -max_total_time="$seconds" "${par[@]}" -print_final_stats=1 \
      -artifact_prefix="$root/$findings/" -print_pcs=0) >"$work.log" 2>&1 &
  pid=$!
  tick=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    (( ++tick % 10 == 0 )) || continue
    line=$(cat "$work.log" "$work"/fuzz-*.log 2>/dev/null | grep -E "#[0-9]+.*(pulse|NEW|REDUCE).*cov:" | tail -1 || true)
    [ -n "$line" ] && echo "   $(( $(date +%s) - start )) s: ${line:0:100}"
  done
  wait "$pid"
  set -e
  logs=$(cat "$work.log" "$work"/fuzz-*.log 2>/dev/null || true)
  execs=$(grep -E "stat::number_of_executed_units" <<<"$logs" | awk '{s+=$2} END {print s+0}' || true)
  cov=$(grep -oE "cov: [0-9]+" <<<"$logs" | awk '{print $2}' | sort -n | tail -1 || true)
  crashes=$(ls "$findings" | grep -cE "^(crash|leak|timeout|oom|slow-unit)-" || true)
  found=$((found + crashes))
  if ((crashes > 0)); then grep -E "ERROR|SUMMARY|fuzzer: " <<<"$logs" | head -5 || true; fi
  if ((merge)); then
    "$bin/$t" -merge=1 "$corpus" "$work" "${dict[@]}" >/dev/null 2>&1 || true
  fi
  elapsed=$(( $(date +%s) - start ))
  summary+=("$(printf '%-22s %8s %14s %10s %8s' "$t" "$elapsed" "${execs:-0}" "${cov:-?}" "$crashes")")
  rm -rf "$work" "$work.log"
done

printf '\n%-22s %8s %14s %10s %8s\n' target seconds executions coverage crashes
printf '%s\n' "${summary[@]}"
if ((found > 0)); then
  echo "fuzz.sh: $found finding(s) in fuzz/findings/" >&2
  exit 1
fi
