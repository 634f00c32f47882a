#!/usr/bin/env bash
# torch 2.x's own DDPOptimizer as the oracle of `overlap partition --mode reference-2x`
# (tools/ddp_optimizer_oracle.py --quick): torch.compile of DDP-wrapped models on a one-rank
# gloo group records DDPOptimizer's buckets; the same models' dynamo graphs, exported, must
# partition into the same parameters in the same buckets in the same order. Skips without
# torch, as zoo_test does, unless OVERLAP_REQUIRE_TORCH=1.
set -euo pipefail
source "$PWD/tools/require_torch.sh"
require_torch ddp_optimizer_test "import torch, torchvision, transformers, torch.distributed"
export OVERLAP=$PWD/tools/overlap
export OVERLAP_PYTHON="$OVERLAP_PY"
exec "$OVERLAP_PY" "$PWD/tools/ddp_optimizer_oracle.py" --quick
