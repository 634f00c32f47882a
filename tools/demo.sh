#!/usr/bin/env bash
# The README's first command: installs what is missing, builds overlap, and runs the demo
# on the built-in default model (gpt2). Extra arguments go to `overlap demo`
# (e.g. `tools/demo.sh llama-70b --lifted`). Steps [14], torch.compile with overlap's DDP
# backend on 2 ranks, and [15], a transformers mixture of experts against torch, run where
# overlap's torch environment is installed
# (tools/bootstrap.sh --with-torch, which the test command runs) and says so where not.
# Step [16] runs ZeRO-3 across 2 hosts of the one-machine cluster (tools/cluster.sh) where
# the machine allows network namespaces, else on loopback, saying why.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/bootstrap.sh
bazel run --ui_event_filters=-info,-stdout,-stderr --noshow_progress //:overlap -- demo "$@"
source tools/python.sh
if [ -x "$OVERLAP_PY" ] && "$OVERLAP_PY" -c "import torch, transformers" 2>/dev/null; then
  bazel build --ui_event_filters=-info,-stdout,-stderr --noshow_progress //python:package
  echo "[14] torch.compile with overlap's DDP backend (python/overlap/torch.py, docs/torch.md):" \
    "GPT-2 from transformers, 2 ranks over gloo, 3 SGD steps against eager DDP;" \
    "\"reference\" splits where DDPOptimizer does, \"default/one-graph\" is one graph whose" \
    "backward all-reduces overlap's buckets, \".../auto\" with the cap overlap's model" \
    "chooses from the forward and the link, measured as it compiles"
  if ! out="$(PYTHONPATH="$PWD/python:$PWD/tools" "$OVERLAP_PY" python/torch_ddp_train.py \
    --models hf_gpt2 --modes reference,default/one-graph,default/one-graph/auto 2>&1)"; then
    echo "$out" >&2
    exit 1
  fi
  echo "$out" | grep '^torch_ddp' | sed 's/^torch_ddp: /     /'
  echo "[15] a mixture of experts from transformers 5 (Mixtral: 4 experts, top-2 routing," \
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
  echo "[14]-[15] torch.compile with overlap's DDP backend, a transformers mixture of experts:" \
    "skipped: overlap's torch environment is not installed (tools/bootstrap.sh --with-torch" \
    "installs it: 2.2 GB, about 90 s)"
fi
# [16]: the cluster on one machine, where the machine allows namespaces (root, iproute2).
bazel build --ui_event_filters=-info,-stdout,-stderr --noshow_progress //tools:overlap
export OVERLAP="$PWD/bazel-bin/tools/overlap"
# A model whose collectives are megabytes (6 layers of 768 x 768), so at 400 Mbit/s their
# time is the link's; calibrated: the collectives measured and this CPU's kernels timed,
# then two schedulers trained, each predicted step beside the measured one.
# Each rank's trace, for how long its collectives waited for a late peer (tools/rank_skew.py).
trace_dir="$(mktemp -d)"
trap 'rm -rf "$trace_dir"' EXIT
zero3=(--strategy zero3 --model mlp --layers 6 --width 768 --batch 1024 --steps 6 --threads 1
  --calibrate --algorithm lookahead,fast_free --timeout 120 --trace "$trace_dir/t.json")
why="$(tools/cluster.sh capable)"
if [ "$why" = ok ]; then
  echo "[16] ZeRO-3 across 2 hosts of the one-machine cluster (tools/cluster.sh: each host a" \
    "network namespace, its link limited to 400 Mbit/s both ways; docs/runtime.md):" \
    "an mlp of 13.6 MiB, 6 steps each under lookahead and fast_free, predicted against measured"
  if ! out="$(tools/cluster.sh job 2 --rate 400mbit --prefix ovdemo -- "${zero3[@]}" 2>&1)"; then
    echo "$out" >&2
    exit 1
  fi
else
  echo "[16] ZeRO-3 on 2 ranks over loopback: not on the one-machine cluster ($why), so" \
    "the links are this machine's memory (collectives are CPU work there, and the predictions" \
    "are for links): an mlp of 13.6 MiB, lookahead and fast_free"
  if ! out="$("$OVERLAP" run --nproc 2 "${zero3[@]}" 2>&1)"; then
    echo "$out" >&2
    exit 1
  fi
fi
echo "$out" | grep -E "(rank 0: peak|^(\[host 0 [0-9.]*\] )?(algorithm|lookahead|fast_free) )" |
  sed 's/^\[host 0 [0-9.]*\] //; s/^/     /'
# The ranks out of step, which the lock-step prediction does not see (docs/runtime.md).
traces=("$trace_dir"/t.json.rank*)
[ -e "${traces[0]}" ] || traces=("$trace_dir/t.json")
"$OVERLAP_STDLIB_PY" tools/rank_skew.py --top 0 "${traces[@]}" | sed -n '1s/^/     /p'
