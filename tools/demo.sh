#!/usr/bin/env bash
# The README's first command: installs what is missing, builds overlap, and runs the demo
# on the built-in default model (gpt2). Extra arguments go to `overlap demo`
# (e.g. `tools/demo.sh llama-70b --lifted`). Steps [13], torch.compile with overlap's DDP
# backend on 2 ranks, and [14], a transformers mixture of experts against torch, run where
# overlap's torch environment is installed
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
  echo "[14] a mixture of experts from transformers 5 (Mixtral: 4 experts, top-2 routing," \
    "the experts' grouped products as one custom op): exported, every pass, executed and" \
    "trained against torch (docs/interop.md, \"Mixture of experts\")"
  if ! out="$("$OVERLAP_PY" tools/zoo.py hf_mixtral 2>&1)"; then
    echo "$out" >&2
    exit 1
  fi
  line="$(echo "$out" | grep '^zoo: hf_mixtral')"
  echo "$line" | sed 's/^zoo: hf_mixtral: /     /; s/ NOTE .*//'
  # A tensor past 1e-4 in float32 passes by the float64 clause (docs/interop.md): say so.
  wide="$(echo "$line" | grep -o "in float64 it matches torch's float64[^)]*)" || true)"
  if [ -n "$wide" ]; then echo "     (past 1e-4 in float32 only: $wide)"; fi
else
  echo "[13]-[14] torch.compile with overlap's DDP backend, a transformers mixture of experts:" \
    "skipped: overlap's torch environment is not installed (tools/bootstrap.sh --with-torch" \
    "installs it: 2.2 GB, about 90 s)"
fi
