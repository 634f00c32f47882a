#!/usr/bin/env bash
# The model zoo's test subset (tools/zoo.py --quick): every torch.nn layer model of
# overlap_export/testing/zoo_modules.py (LSTM, GRU, RNN, multi-head attention with and
# without a -inf mask, Transformer encoder / decoder layers, GroupNorm, ConvTranspose2d,
# Upsample and interpolate, Dropout in evaluation) and torchvision classifiers covering
# every operator family the zoo needs, and transformers and timm families (Llama, T5,
# Whisper, timm's ConvNeXt), each through export, annotate, inspect --shapes, partition,
# every scheduler forward and backward, exec and the comparison with torch, and three SGD
# and three AdamW steps in `overlap train` against torch's own training. With
# --capture-export: three of them with the pair captured by torch.export.
# The whole zoo (every torchvision constructor) is `tools/zoo.py`, which rewrites
# docs/gallery.md's table. Skips without torch, as export_test does, unless
# OVERLAP_REQUIRE_TORCH=1.
set -euo pipefail
source "$PWD/tools/require_torch.sh"
require_torch zoo_test "import torch, torchvision, transformers, timm"
export OVERLAP=$PWD/tools/overlap
export OVERLAP_PYTHON="$OVERLAP_PY"
if [[ "${1:-}" == --capture-export ]]; then
  # The other capture path: torch.export's program, then AOTAutograd, on a convolutional
  # network, torch.nn's encoder layer and a transformers decoder (//tools:zoo_export_test).
  exec "$OVERLAP_PY" "$PWD/tools/zoo.py" --capture export resnet18 transformer_encoder hf_llama
fi
exec "$OVERLAP_PY" "$PWD/tools/zoo.py" --quick
