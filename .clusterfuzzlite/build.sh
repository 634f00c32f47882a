#!/bin/bash -eu
# OSS-Fuzz / ClusterFuzzLite build script: every libFuzzer target of fuzz/ into $OUT.
#
# Runs from the repository root (the Dockerfile's WORKDIR), with the variables the fuzzing
# infrastructure sets: $CC $CXX $CFLAGS $CXXFLAGS (sanitizer and coverage flags included),
# $LIB_FUZZING_ENGINE (-fsanitize=fuzzer for libFuzzer), $OUT; $WORK for intermediate files
# (a temporary folder when unset). tools/check_oss_fuzz.sh runs it with OSS-Fuzz's values.
#
# What lands in $OUT, for each fuzz/<name>_fuzzer.cc:
#   <name>_fuzzer                 linked statically against Abseil (fuzzing runners have no
#                                 libabsl); libstdc++ and libc stay shared, as everywhere
#   <name>_fuzzer_seed_corpus.zip fuzz/corpus/<name>/, flat
#   <name>_fuzzer.dict            when fuzz/<name>_fuzzer.dict exists
#
# No Bazel here (the builder images have none): the sources are compiled directly. The
# library is every non-test source of the packages the fuzzers link (graph, partition,
# schedule, tools, their testing/ oracles), less programs (a main) and files that include a
# library the fuzzers do not link (GoogleTest, RapidCheck, Benchmark, Gloo, CUDA); the
# linker then takes from the archive only what each fuzzer references. The CLI's exec and
# train commands run the CPU kernels, so OpenBLAS is linked too, statically (libopenblas.a
# from libopenblas-dev; runners have no libopenblas). oneDNN has no static archive in the
# distributions: OVERLAP_NO_DNNL builds its stand-in (the convolutions run their own loops).
# Nor has SLEEF: OVERLAP_NO_SLEEF evaluates runtime/core/vmath.h's functions with libm.
#
# Debian's / Ubuntu's Abseil archives are built against libstdc++, so -stdlib=libc++ (which
# OSS-Fuzz puts into CXXFLAGS for MSan's sake) is removed: project.yaml asks for address and
# undefined only.

root=$(pwd)
[ -d "$root/fuzz" ] || root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
: "${CC:=clang}" "${CXX:=clang++}" "${CFLAGS:=}" "${CXXFLAGS:=}"
: "${LIB_FUZZING_ENGINE:=-fsanitize=fuzzer}"
: "${OUT:?build.sh: set OUT to the folder that receives the fuzzers}"
if [ -z "${WORK:-}" ]; then
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
fi
mkdir -p "$OUT" "$WORK"
CXXFLAGS="${CXXFLAGS//-stdlib=libc++/}"
cxxflags="$CXXFLAGS -std=c++17 -I$root -DOVERLAP_NO_GLOO -DOVERLAP_NO_CUDA -DOVERLAP_NO_DNNL -DOVERLAP_NO_SLEEF"

shopt -s nullglob
absl=(${ABSL_LIB_DIR:-/usr/lib/*-linux-gnu}/libabsl_*.a /usr/lib/libabsl_*.a)
if ((${#absl[@]} == 0)); then
  echo "build.sh: no libabsl_*.a (install libabsl-dev, or set ABSL_LIB_DIR)" >&2
  exit 1
fi

# The library's sources.
sources=()
for f in $(find graph partition runtime schedule tools -name '*.cc' ! -name '*_test.cc' \
             ! -name '*_benchmark.cc' | sort); do
  # Sources needing Gloo, directly or through our Gloo-facing headers, stay out (the image
  # has no Gloo; cli.cc drops the commands that use it under OVERLAP_NO_GLOO), and so does
  # the CUDA backend (no CUDA either; the demo drops its CUDA step under OVERLAP_NO_CUDA).
  if grep -qE '^int main\(' "$f" ||
     grep -qE '^#include [<"](gtest|gmock|rapidcheck|benchmark|gloo|cuda|nccl)' "$f" ||
     grep -qE '^#include "runtime/(comm/tcp_store|comm/gloo_communicator|comm/watchdog|job/job)\.h"' "$f" ||
     [[ $f == runtime/cuda/* ]]; then
    continue
  fi
  sources+=("$f")
done
openblas=(${OPENBLAS_LIB:-/usr/lib/*-linux-gnu/libopenblas.a})
if ((${#openblas[@]} == 0)); then
  echo "build.sh: no libopenblas.a (install libopenblas-dev, or set OPENBLAS_LIB)" >&2
  exit 1
fi
echo "build.sh: compiling ${#sources[@]} library sources with $CXX ($(nproc) jobs)"
export CXX cxxflags WORK
printf '%s\n' "${sources[@]}" | xargs -P "$(nproc)" -I{} bash -c \
  'mkdir -p "$WORK/obj/$(dirname {})" && $CXX $cxxflags -c {} -o "$WORK/obj/{}.o"'
objects=()
for f in "${sources[@]}"; do objects+=("$WORK/obj/$f.o"); done
rm -f "$WORK/liboverlap.a"
ar rcs "$WORK/liboverlap.a" "${objects[@]}"

count=0
for src in fuzz/*_fuzzer.cc; do
  target=$(basename "$src" .cc)
  name=${target%_fuzzer}
  echo "build.sh: $target"
  $CXX $cxxflags "$src" -o "$OUT/$target" $LIB_FUZZING_ENGINE "$WORK/liboverlap.a" \
    -Wl,--start-group "${absl[@]}" -Wl,--end-group "${openblas[0]}" -lpthread -lm
  if [ -d "fuzz/corpus/$name" ]; then
    rm -f "$OUT/${target}_seed_corpus.zip"
    (cd "fuzz/corpus/$name" && zip -q -r -j "$OUT/${target}_seed_corpus.zip" .)
  fi
  [ -f "fuzz/$target.dict" ] && cp "fuzz/$target.dict" "$OUT/"
  count=$((count + 1))
done
echo "build.sh: $count fuzzers in $OUT"
