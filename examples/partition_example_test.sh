#!/usr/bin/env bash
# Runs the library example and checks what it reports: DDP's bucketing of four 16 MiB
# layers under a 20 MiB cap (the first bucket closes at 1 MiB, then two layers share one),
# and the compile hook's fallback for the piece the backend refuses.
set -euo pipefail
out=$(examples/partition_example)
echo "$out"
grep -q "3 buckets, 64.00 MiB counted" <<<"$out"
grep -q "submodules (call order): submod_0 -> submod_1 -> submod_2" <<<"$out"
grep -q "submod_1: 4 nodes, 1 inputs, 1 outputs, NOT compiled: piece too large for this backend" <<<"$out"
grep -q "compiled 2 of 3 pieces" <<<"$out"
