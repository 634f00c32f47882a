#!/usr/bin/env bash
# DeepSpeed DeepCompile's own fast_free_schedule and simple_prefetch
# (deepspeed/compile/list_schedule.py, the pinned DeepSpeed) as the oracles of `overlap
# schedule --algorithm fast_free_0.19 / simple_prefetch` on the AOT pairs torch 2.x gives
# for zoo models (tools/deepcompile_oracle.py --quick): the orders of every forward and
# backward must be equal node for node (docs/deepcompile.md, "Checked against DeepSpeed"). Skips without torch and DeepSpeed, as
# zoo_test does, unless OVERLAP_REQUIRE_TORCH=1.
set -euo pipefail
source "$PWD/tools/require_torch.sh"
require_torch deepcompile_test "import torch, torchvision, transformers, deepspeed.compile.list_schedule"
export OVERLAP=$PWD/tools/overlap
export OVERLAP_PYTHON="$OVERLAP_PY"
exec "$OVERLAP_PY" "$PWD/tools/deepcompile_oracle.py" --quick
