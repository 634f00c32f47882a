#!/usr/bin/env bash
# The CUDA probe must link and run on every machine; without a GPU it reports the skip.
set -euo pipefail
out=$(tools/cuda_probe)
echo "$out"
grep -q "CUDA runtime" <<<"$out"
grep -qE "no CUDA device|device 0:" <<<"$out"
