#!/usr/bin/env bash
# overlap inside torch's stack: `splits` checks the DDP backend's pieces
# (python/overlap/torch.py) against torch's DDPOptimizer, `train` its 2-rank training against
# eager DDP, `zero3` overlap.torch.zero3 against FSDP2, `fault` a lost rank under both,
# `deepspeed` the DeepCompile pass (python/overlap/deepspeed.py). Skips
# without torch unless OVERLAP_REQUIRE_TORCH=1.
set -euo pipefail
source "$PWD/tools/require_torch.sh"
require_torch torch_ddp_test "import torch, torchvision, transformers, torch.distributed"
export PYTHONPATH="$PWD/python:$PWD/tools"
export OVERLAP_PYTHON="$OVERLAP_PY"
case "$1" in
  splits) exec "$OVERLAP_PY" "$PWD/tools/ddp_optimizer_oracle.py" --backend --quick ;;
  train) exec "$OVERLAP_PY" "$PWD/python/torch_ddp_train.py" ;;
  zero3) exec "$OVERLAP_PY" "$PWD/python/torch_zero3_train.py" ;;
  fault) exec "$OVERLAP_PY" "$PWD/python/torch_fault_train.py" ;;
  deepspeed)
    require_torch deepspeed_pass_test "import deepspeed"
    export OVERLAP="$PWD/tools/overlap"
    exec "$OVERLAP_PY" "$PWD/tools/deepcompile_oracle.py" --overlap-pass --quick
    ;;
  *) echo "torch_ddp_test: unknown check '$1'" >&2; exit 2 ;;
esac
