#!/usr/bin/env bash
# Checks .clusterfuzzlite/build.sh the way OSS-Fuzz / ClusterFuzzLite would use it, without
# Docker (CI has no Docker daemon): runs it with the variables OSS-Fuzz's builder sets
# (clang, -fsanitize=fuzzer-no-link with address and undefined, -stdlib=libc++ in CXXFLAGS,
# LIB_FUZZING_ENGINE=-fsanitize=fuzzer) into a fresh $OUT, then verifies
#   - one *_fuzzer per fuzz/*_fuzzer.cc, at least six;
#   - a <target>_seed_corpus.zip per target holding every file of fuzz/corpus/<name>/;
#   - every fuzz/<target>.dict copied;
#   - no libabsl among the shared libraries (ldd): fuzzing runners have none;
#   - ASan, UBSan and libFuzzer linked in (their symbols);
#   (objects come from ccache when an earlier run compiled the same source with the same
#   flags: a warm machine recompiles only what changed)
#   - each fuzzer runs -runs=1000 on its unzipped seed corpus clean, with OSS-Fuzz's limits
#     (-rss_limit_mb=2560 -timeout=25) and sanitizer options.
# OSS-Fuzz builds address and undefined as two sets of binaries; this builds one set with
# both (a superset of the checks of either).
#
#   tools/check_oss_fuzz.sh [--out DIR]   (DIR: keep the fuzzers there, for tools/fuzz.sh --bin)
set -uo pipefail
cd "$(dirname "$0")/.."
out=""
[ "${1:-}" = "--out" ] && out="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -n "$out" ] || out="$tmp/out"
rm -rf "$out" && mkdir -p "$out"

ubsan_checks=array-bounds,bool,builtin,enum,float-divide-by-zero,function,integer-divide-by-zero,null,object-size,return,returns-nonnull-attribute,shift,signed-integer-overflow,unreachable,vla-bound,vptr
export CC=clang CXX=clang++
# The objects are kept between runs (~/.cache/overlap/ccache, as Bazel's disk cache): a
# clone elsewhere hits them too (paths under the checkout are hashed relative to it), so
# only a change's sources recompile. build.sh sees "ccache clang++" as its compiler.
if command -v ccache >/dev/null; then
  export CC="ccache clang" CXX="ccache clang++"
  export CCACHE_DIR="$HOME/.cache/overlap/ccache" CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
  export CCACHE_MAXSIZE=2G
fi
export CFLAGS="-O1 -fno-omit-frame-pointer -gline-tables-only \
-DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION -fsanitize=address -fsanitize-address-use-after-scope \
-fsanitize=$ubsan_checks,unsigned-integer-overflow -fno-sanitize-recover=$ubsan_checks \
-fsanitize=fuzzer-no-link"
export CXXFLAGS="$CFLAGS -stdlib=libc++"
export LIB_FUZZING_ENGINE=-fsanitize=fuzzer
export OUT="$out" WORK="$tmp/work" SANITIZER=address FUZZING_ENGINE=libfuzzer
export ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1:handle_abort=1:symbolize=1
export UBSAN_OPTIONS=print_stacktrace=1:print_summary=1:silence_unsigned_overflow=1:halt_on_error=1

start=$(date +%s)
if ! .clusterfuzzlite/build.sh; then
  echo "check_oss_fuzz: build.sh failed" >&2
  exit 1
fi
echo "check_oss_fuzz: build.sh took $(( $(date +%s) - start )) s"

bad=0
fail() { echo "check_oss_fuzz: $*" >&2; bad=1; }
expected=$(ls fuzz/*_fuzzer.cc | wc -l)
built=$(find "$out" -maxdepth 1 -name '*_fuzzer' -type f -executable | wc -l)
((built == expected)) || fail "$built fuzzers in \$OUT, expected $expected"
((built >= 6)) || fail "only $built fuzzers (at least six expected)"
for d in fuzz/*.dict; do
  [ -f "$out/$(basename "$d")" ] || fail "$(basename "$d") not copied"
done

printf '%-24s %6s %8s %10s  %s\n' fuzzer seeds runs seconds result
for src in fuzz/*_fuzzer.cc; do
  t=$(basename "$src" .cc)
  name=${t%_fuzzer}
  bin="$out/$t"
  [ -x "$bin" ] || { fail "$t missing"; continue; }
  if ldd "$bin" | grep -q libabsl; then fail "$t links libabsl dynamically"; fi
  syms=$(nm "$bin" 2>/dev/null)
  for sym in __asan_report_load __ubsan_handle_ LLVMFuzzerRunDriver; do
    grep -q "$sym" <<<"$syms" || fail "$t lacks $sym (not built with ASan, UBSan and libFuzzer)"
  done
  zip="$out/${t}_seed_corpus.zip"
  [ -f "$zip" ] || { fail "${t}_seed_corpus.zip missing"; continue; }
  seeds=$(unzip -Z1 "$zip" | wc -l)
  files=$(find "fuzz/corpus/$name" -type f | wc -l)
  ((seeds == files)) || fail "${t}_seed_corpus.zip holds $seeds files, fuzz/corpus/$name $files"
  corpus="$tmp/corpus/$name"
  mkdir -p "$corpus" && unzip -q -o "$zip" -d "$corpus"
  dict=()
  [ -f "$out/$t.dict" ] && dict=(-dict="$out/$t.dict")
  s=$(date +%s)
  if (cd "$tmp" && "$bin" "${dict[@]}" -runs=1000 -rss_limit_mb=2560 -timeout=25 \
        -artifact_prefix="$tmp/" "$corpus") >"$tmp/$t.log" 2>&1; then
    result=clean
  else
    result=FAILED
    fail "$t -runs=1000 failed:"
    grep -E "ERROR|SUMMARY|runtime error|deadly" "$tmp/$t.log" | head -5 >&2
  fi
  printf '%-24s %6d %8d %10d  %s\n' "$t" "$seeds" 1000 $(( $(date +%s) - s )) "$result"
done
if ((bad)); then exit 1; fi
echo "check_oss_fuzz: ok ($built fuzzers, seed corpora, dictionaries, no libabsl, 1,000 runs each clean)"
