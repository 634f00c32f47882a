#!/usr/bin/env bash
# The README's first command: installs what is missing, builds overlap, and runs the demo
# on the built-in default model (gpt2). Extra arguments go to `overlap demo`
# (e.g. `tools/demo.sh llama-70b --lifted`). Step [13], torch.compile with overlap's DDP
# backend on 2 ranks, runs where overlap's torch environment is installed
# (tools/bootstrap.sh --with-torch, which the test command runs) and says so where not.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/bootstrap.sh
bazel run --ui_event_filters=-info,-stdout,-stderr --noshow_progress //:overlap -- demo "$@"
source tools/python.sh
if [ -x "$OVERLAP_PY" ] && "$OVERLAP_PY" -c "import torch, transformers" 2>/dev/null; then
  bazel build --ui_event_filters=-info,-stdout,-stderr --noshow_progress //python:package
  echo "[13] torch.compile with overlap's DDP backend (python/overlap/torch.py, docs/torch.md):" \
    "GPT-2 from transformers, 2 ranks over gloo, 3 SGD steps against eager DDP;" \
    "\"reference\" splits where DDPOptimizer does, \"default/one-graph\" is one graph whose" \
    "backward all-reduces overlap's buckets"
  if ! out="$(PYTHONPATH="$PWD/python:$PWD/tools" "$OVERLAP_PY" python/torch_ddp_train.py \
    --models hf_gpt2 --modes reference,default/one-graph 2>&1)"; then
    echo "$out" >&2
    exit 1
  fi
  echo "$out" | grep '^torch_ddp' | sed 's/^torch_ddp: /     /'
else
  echo "[13] torch.compile with overlap's DDP backend: skipped: overlap's torch environment" \
    "is not installed (tools/bootstrap.sh --with-torch installs it: 2.2 GB, about 90 s)"
fi
