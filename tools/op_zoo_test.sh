#!/usr/bin/env bash
# The operator classes users' models reach (tools/overlap_export/testing/op_modules.py: 1-D
# and 3-D convolutions and pooling, adaptive pooling of 1 to 3 dimensions, gather / scatter, cumsum, embedding
# bags, repeat_interleave, sin / cos / abs / log, prelu / leaky_relu / pixel_shuffle, max /
# amax, factories and casts, dropout in training on torch's own masks), each through every
# step of the model zoo (tools/zoo.py --ops): export, annotate, inspect --shapes, partition,
# every scheduler, exec compared with torch forward and backward, three SGD steps against
# torch's own training. Skips without torch, as zoo_test does, unless OVERLAP_REQUIRE_TORCH=1.
set -euo pipefail
source "$PWD/tools/require_torch.sh"
require_torch op_zoo_test "import torch, torchvision, functorch"
export OVERLAP=$PWD/tools/overlap
export OVERLAP_PYTHON="$OVERLAP_PY"
exec "$OVERLAP_PY" "$PWD/tools/zoo.py" --ops
