#!/usr/bin/env bash
# Fuzzing campaign: builds the fuzz targets with --config=fuzz (clang, libFuzzer, ASan,
# UBSan), runs each for M minutes on a scratch copy of its corpus, merges what found new
# coverage back into fuzz/corpus/<target>/ (minimised with -merge=1), and prints a table.
#
#   tools/fuzz.sh [--minutes M] [--jobs J] [target ...]     (default: every target, 1 min)
#
# A crash leaves its input as fuzz/findings/<target>/crash-*; reproduce it with
#   bazel run //fuzz:<target> -- $PWD/fuzz/findings/<target>/crash-...
# (a plain build runs the target once on the file), fix it, and add the file to the corpus.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=1
jobs=1
targets=()
while (($#)); do
  case "$1" in
    --minutes) minutes="$2"; shift 2 ;;
    --minutes=*) minutes="${1#*=}"; shift ;;
    --jobs) jobs="$2"; shift 2 ;;
    --jobs=*) jobs="${1#*=}"; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if ((${#targets[@]} == 0)); then
  mapfile -t targets < <(ls fuzz/corpus)
  targets=("${targets[@]/%/_fuzzer}")
fi

tools/bootstrap.sh
bazel build --config=fuzz "${targets[@]/#///fuzz:}"
bin=$(bazel info --config=fuzz bazel-bin 2>/dev/null)

summary=()
found=0
for t in "${targets[@]}"; do
  name="${t%_fuzzer}"
  corpus="fuzz/corpus/$name"
  work=$(mktemp -d)
  findings="fuzz/findings/$name"
  mkdir -p "$findings"
  dict=()
  [ "$name" = json_reader ] && dict=(-dict=fuzz/json.dict)
  echo "== $t: ${minutes} min, $jobs job(s), corpus $corpus ($(ls "$corpus" | wc -l) files)"
  set +e
  "$bin/fuzz/$t" "$work" "$corpus" "${dict[@]}" -max_total_time=$((minutes * 60)) \
      -jobs="$jobs" -workers="$jobs" -print_final_stats=1 -artifact_prefix="$findings/" \
      -print_pcs=0 2>&1 | tee "$work.log" | grep --line-buffered -E "pulse|NEW_FUNC|ERROR|crash|Done" || true
  set -e
  execs=$(grep -hE "stat::number_of_executed_units" "$work.log" "$work"/../fuzz-*.log 2>/dev/null | awk '{s+=$2} END {print s+0}')
  cov=$(grep -hoE "cov: [0-9]+" "$work.log" | tail -1 | awk '{print $2}')
  crashes=$(ls "$findings" | grep -cE "^(crash|leak|timeout|oom)-" || true)
  found=$((found + crashes))
  # Keep only inputs that add coverage (minimising merge).
  "$bin/fuzz/$t" -merge=1 "$corpus" "$work" "${dict[@]}" >/dev/null 2>&1 || true
  summary+=("$(printf '%-24s %14s %10s %8s' "$t" "${execs:-0}" "${cov:-?}" "$crashes")")
  rm -rf "$work" "$work.log"
done

printf '\n%-24s %14s %10s %8s\n' target executions coverage crashes
printf '%s\n' "${summary[@]}"
if ((found > 0)); then
  echo "fuzz.sh: $found finding(s) in fuzz/findings/" >&2
  exit 1
fi
