#!/usr/bin/env bash
# The GPU check, in two halves, because a GPU machine has no Bazel, no Debian development
# packages and no network:
#
#   tools/gpu_check.sh --build DIR      (here) builds the GPU test binary, the CLI and the
#                                       benchmark, statically linked against overlap's own
#                                       code, and copies them with the shared libraries they
#                                       need except the GPU machine's own (libcuda, CUDA's
#                                       runtime and libraries, NCCL, glibc) into DIR/bin and
#                                       DIR/lib; at most 64 MiB in all
#   tools/gpu_check.sh --run DIR OUT    (on the GPU machine; works on any machine) prints the
#                                       CUDA, driver and NCCL versions it finds and runs each
#                                       stage under its own timeout, the whole within 4
#                                       minutes, writing OUT/results.txt as it goes
#
# OUT/results.txt has one line per stage, written when the stage ends:
#   stage <name> <pass|fail|skip|timeout> <seconds> <note>
# and each stage's output is OUT/<name>.log. Without a usable GPU (no device, or a driver
# older than CUDA 13) every GPU stage is recorded as skip, with the reason.
set -uo pipefail

usage() {
  echo "usage: tools/gpu_check.sh --build DIR | --run DIR OUT" >&2
  exit 2
}

# The libraries a GPU machine brings itself.
own_library() {
  case "$(basename "$1")" in
  libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux* | libcuda.so* | \
    libcudart.so* | libnccl.so* | libcublas* | libcudnn* | libnvidia*) return 0 ;;
  esac
  case "$1" in /usr/local/cuda*) return 0 ;; esac
  return 1
}

build() {
  local dir=$1
  local targets=(//runtime/cuda:cuda_gpu_api_test //runtime/cuda:gpu_benchmark //tools:overlap
    //tools:overlap_compute //runtime/cuda:liboverlap_cuda.so)
  # Static linking of overlap's own libraries (tests otherwise link them as .so files).
  bazel build --dynamic_mode=off "${targets[@]}" || exit 1
  local bin
  bin=$(bazel info bazel-bin --dynamic_mode=off 2>/dev/null)
  rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/lib"
  # The CUDA plugin beside overlap, where its loader looks (runtime/cuda/cuda_plugin.h).
  # overlap_compute beside overlap, where its hand-off looks (tools/compute_hand_off.h).
  for f in runtime/cuda/cuda_gpu_api_test runtime/cuda/gpu_benchmark tools/overlap \
    tools/overlap_compute runtime/cuda/liboverlap_cuda.so; do
    cp "$bin/$f" "$dir/bin/" && chmod u+w "$dir/bin/$(basename "$f")"
    strip "$dir/bin/$(basename "$f")"
  done
  local lib
  for lib in $(ldd "$dir"/bin/* | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do
    own_library "$lib" || cp -L "$lib" "$dir/lib/"
  done
  cp tools/gpu_check.sh "$dir/"
  local bytes
  bytes=$(du -sb "$dir" | cut -f1)
  echo "gpu_check: built $dir: $((bytes / 1048576)) MiB ($(ls "$dir/bin" | tr '\n' ' '))"
  if ((bytes > 64 * 1048576)); then
    echo "gpu_check: $dir is over 64 MiB" >&2
    exit 1
  fi
}

run() {
  local dir out
  dir=$(cd "$1" && pwd) || exit 2
  mkdir -p "$2" && out=$(cd "$2" && pwd) || exit 2
  local results="$out/results.txt"
  : >"$results"
  local cuda_lib=${CUDA_HOME:-/usr/local/cuda}/lib64
  export LD_LIBRARY_PATH="$dir/lib:$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  local start=$SECONDS

  # stage NAME TIMEOUT COMMAND...: runs it, records pass / fail / timeout.
  stage() {
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS rc
    timeout --kill-after=5 "$limit" "$@" >"$out/$name.log" 2>&1
    rc=$?
    local status=pass note="exit $rc"
    if ((rc == 124 || rc == 137)); then
      status=timeout note="over ${limit}s"
    elif ((rc != 0)); then
      status=fail
    fi
    echo "stage $name $status $((SECONDS - t0)) $note" >>"$results"
    echo "gpu_check: $name: $status ($((SECONDS - t0)) s)"
  }
  skip() {
    echo "stage $1 skip 0 $2" >>"$results"
    echo "gpu_check: $1: skipped ($2)"
  }

  # Versions: always.
  timeout 30 "$dir/bin/gpu_benchmark" probe >"$out/probe.log" 2>&1
  local probe=$?
  cat "$out/probe.log"
  local reason
  reason=$(sed -n 's/^probe unusable //p' "$out/probe.log")
  if ((probe == 0)); then
    echo "stage probe pass 0 usable" >>"$results"
  elif ((probe == 3)); then
    echo "stage probe pass 0 ${reason:-unusable}" >>"$results"
  else
    echo "stage probe fail 0 exit $probe" >>"$results"
    reason="the probe failed (exit $probe)"
  fi
  local gpu_stages=(gpu_tests differential nccl_sweep overlap two_ranks_gloo)
  if ((probe != 0)); then
    for s in "${gpu_stages[@]}"; do skip "$s" "${reason:-no usable GPU}"; done
  else
    stage gpu_tests 40 "$dir/bin/cuda_gpu_api_test" --gtest_filter=-*Differential*
    stage differential 40 "$dir/bin/cuda_gpu_api_test" --gtest_filter=*Differential*
    stage nccl_sweep 40 "$dir/bin/gpu_benchmark" nccl
    stage overlap 50 "$dir/bin/gpu_benchmark" overlap
    # One GPU: both ranks on it, CUDA compute, Gloo through the host (NCCL refuses two
    # ranks on one device).
    stage two_ranks_gloo 40 "$dir/bin/overlap" run --nproc 2 --device cuda --collectives gloo \
      --steps 5 --timeout 30
  fi
  echo "stage total pass $((SECONDS - start)) within 240 s" >>"$results"
  echo "gpu_check: results in $results"
}

case "${1:-}" in
--build) [[ $# == 2 ]] || usage; build "$2" ;;
--run) [[ $# == 3 ]] || usage; run "$2" "$3" ;;
*) usage ;;
esac
