#!/usr/bin/env bash
# The exporter (tools/overlap_export, under the Python tools/python.sh names) on real models,
# and each file it writes through the C++ side:
#   resnet18, mobilenet_v2 (torchvision, random weights, 10 classes), vit_b_16 (image_size
#   64: torch.fx cannot trace torchvision 0.14's, so the AOT path only there; 0.29's it
#   can) and the small GPT of overlap_export/testing (tied embedding and head);
#   - the exporter's parameter count (elements over unique storages) equals `overlap
#     inspect`'s for every file;
#   - `overlap inspect --shapes` reads and verifies each file, and each node with a shape
#     rule (docs/ops.md) states what its rule gives;
#   - module-style graphs: `overlap partition` in both modes (default and reference); the
#     ViTs, which have none, in the default mode on the AOT forward;
#   - `overlap annotate` gives every file the cost model's device times, with a formula
#     for every op (none takes the fallback);
#   - AOT pairs, annotated: `overlap schedule` by every scheduler, forward and backward
#     (ZeRO-3 ops inserted, the schedule verified and simulated);
#   - resnet18, mobilenet_v2, the small GPT and the small ViT run in the executor (`overlap exec`) on torch's weights and
#     inputs, the loss and every parameter gradient within 1e-4 * max|torch| of torch's own
#     (compare.py);
#   - training the small GPT (SGD and AdamW, 5 steps) in `overlap train`, 2-rank DDP and
#     2-rank ZeRO-3 under every scheduler matches torch's own training (below), and a
#     batch-norm model in training mode (running statistics updated) likewise, buffers too;
#   - two exports of one model are byte-identical;
#   - a non-finite constant (a mask's -inf) is written, read back and runs as torch does;
#   - weight norm (its computed weight, its fused ops), label smoothing (tensor constants
#     the backward reads) and a model casting to float32 inside (no float64 reference, a
#     note) export and run in the executor as torch does; weight norm trains as torch does;
#   - a model that cannot be imported exits 1 naming the step, writing no file.
# Without torch the test skips, saying so, unless OVERLAP_REQUIRE_TORCH=1 (the test command
# sets it: tools/bootstrap.sh --with-torch installed it).
set -euo pipefail
overlap=$PWD/tools/overlap
export PYTHONPATH=$PWD/tools
source "$PWD/tools/require_torch.sh"
require_torch export_test "import torch, torchvision, functorch"
py="$OVERLAP_PY"
out=${TEST_TMPDIR:-$(mktemp -d)}
fail() { echo "export_test: FAILED: $*" >&2; exit 1; }

# name | constructor | kwargs | input | module-style expected (yes, no, either: by the
# torchvision version) | weights file
models=(
  "resnet18|torchvision.models:resnet18|{\"num_classes\": 10}|2x3x32x32|yes|yes"
  "mobilenet_v2|torchvision.models:mobilenet_v2|{\"num_classes\": 10}|2x3x32x32|yes|yes"
  "vit_b_16|torchvision.models:vit_b_16|{\"image_size\": 64}|1x3x64x64|either|no"
  "small_gpt|overlap_export.testing.small_gpt:small_gpt|{}|2x16:int64:64|yes|yes"
  "small_vit|torchvision.models.vision_transformer:VisionTransformer|{\"image_size\": 32, \"patch_size\": 16, \"num_layers\": 2, \"num_heads\": 4, \"hidden_dim\": 64, \"mlp_dim\": 128, \"num_classes\": 10}|2x3x32x32|either|yes"
)

# Every forward placeholder's meta.param / meta.buffer / meta.input names a tensor of the
# weights file, and every trainable parameter has torch's gradient there.
check_weights() {
  "$py" - "$1" "$2" <<'PY'
import json, struct, sys
graph, weights = json.load(open(sys.argv[1])), open(sys.argv[2], "rb").read()
n = struct.unpack("<Q", weights[:8])[0]
keys = set(json.loads(weights[8:8 + n]))
missing = []
for node in graph["nodes"]:
    meta = node.get("meta", {})
    for field, prefix in (("param", "param/"), ("buffer", "buffer/"), ("input", "")):
        if field in meta and prefix + meta[field] not in keys:
            missing.append(prefix + meta[field])
for p in graph["params"]:
    if p.get("requires_grad", True) and p.get("storage", p["name"]) == p["name"] \
            and "ref/grad/" + p["name"] not in keys:
        missing.append("ref/grad/" + p["name"])
if missing or "ref/loss" not in keys:
    sys.exit("weights file lacks " + ", ".join(missing or ["ref/loss"]))
PY
}
schedulers=$("$overlap" schedule --list-algorithms | awk '{print $1}')
for m in "${models[@]}"; do
  IFS='|' read -r name ctor kwargs input module weights <<<"$m"
  start=$(date +%s)
  extra=()
  [ "$weights" = yes ] && extra=(--weights "$out/$name.safetensors" --reference)
  log=$("$py" -m overlap_export "$ctor" --kwargs "$kwargs" --input "$input" --aot --loss ce \
          -o "$out/$name" "${extra[@]}" 2>&1) || fail "$name: export: $log"
  if [ "$weights" = yes ]; then
    check_weights "$out/$name.forward.json" "$out/$name.safetensors" || fail "$name: weights"
  fi
  echo "$log"
  want=$(grep -o 'parameters: [0-9,]*' <<<"$log" | head -1 | tr -d ,)
  files=("$out/$name.forward.json" "$out/$name.backward.json")
  if [ "$module" = either ]; then  # torch.fx traces torchvision's ViT from 0.29 on, not 0.14
    module=no
    [ -e "$out/$name.json" ] && module=yes
  fi
  if [ "$module" = yes ]; then
    files+=("$out/$name.json")
  elif [ -e "$out/$name.json" ] || ! grep -q "AOT only" <<<"$log"; then
    fail "$name: torch.fx cannot trace it, yet a module-style file was written"
  fi
  for f in "${files[@]}"; do
    report=$("$overlap" inspect --shapes "$f" 2>&1) ||
      fail "$f does not read, verify or pass the shape check: $(tail -1 <<<"$report")"
    got=$(grep -o '^parameters: [0-9,]*' <<<"$report" | tr -d ,)
    [ "$got" = "$want" ] || fail "$f: '$got', the exporter counted '$want'"
  done
  if [ "$module" = yes ]; then
    for mode in default reference; do
      "$overlap" partition "$out/$name.json" --mode "$mode" >/dev/null ||
        fail "$name: partition --mode $mode"
    done
  else
    # No module-style graph: the default mode buckets the AOT forward's lifted parameters
    # (PyTorch's reference mode sees only module-owned ones, so it has none to bucket).
    buckets=$("$overlap" partition "$out/$name.forward.json" --mode default) ||
      fail "$name: partition --mode default on the AOT forward"
    grep -q "^[1-9][0-9]* buckets" <<<"$buckets" ||
      fail "$name: no DDP buckets on the AOT forward: $buckets"
  fi
  # Exported graphs have no device times: `annotate` gives them the cost model's, and every
  # op these models use has a formula (docs/cost-model.md), so none takes the fallback.
  for f in "${files[@]}"; do
    report=$("$overlap" annotate "$f" -o "${f%.json}.annotated.json" 2>&1) ||
      fail "$f: annotate: $report"
    grep -q " 0 by the memory-only fallback" <<<"$report" ||
      fail "$f: ops without a cost formula: $report"
  done
  for s in $schedulers; do
    "$overlap" schedule "$out/$name.forward.annotated.json" --algorithm "$s" >/dev/null ||
      fail "$name: schedule forward by $s"
    "$overlap" schedule "$out/$name.backward.annotated.json" --backward --algorithm "$s" \
      >/dev/null || fail "$name: schedule backward by $s"
  done
  echo "export_test: $name ok ($(( $(date +%s) - start )) s)"
done

# The executor against torch: resnet18 (evaluation-mode batch norm), mobilenet_v2
# (evaluation-mode batch norm, depthwise convolutions, ReLU6 as hardtanh), the small GPT (tied
# embedding and head, causal attention through bmm and masked_fill) and the small ViT
# (torchvision's VisionTransformer: 2 layers, hidden 64, image 32, patch 16) on torch's
# weights and inputs; the loss and every parameter gradient within 1e-4 * max|torch|.
for name in resnet18 mobilenet_v2 small_gpt small_vit; do
  "$overlap" exec "$out/$name.forward.json" --backward-graph "$out/$name.backward.json" \
    --weights "$out/$name.safetensors" --save "$out/$name.out.safetensors" >"$out/exec.log" ||
    fail "$name: exec: $(tail -3 "$out/exec.log")"
  grep -q "inputs: [0-9]* from files, 0 seeded" "$out/exec.log" ||
    fail "$name: exec seeded what the weights file should bind: $(grep inputs: "$out/exec.log")"
  "$py" -m overlap_export.compare "$out/$name.forward.json" "$out/$name.safetensors" \
    "$out/$name.out.safetensors" || fail "$name: the executor differs from torch"
done

# The exporter's default loss (`sum` of the model's output: aten.sum.default) runs in the
# executor too, and agrees with torch: the small GPT without --loss.
"$py" -m overlap_export overlap_export.testing.small_gpt:small_gpt --input 2x16:int64:64 --aot \
  -o "$out/gpt_sum" --weights "$out/gpt_sum.safetensors" --reference >/dev/null ||
  fail "gpt_sum: export with the default loss"
grep -q '"aten.sum.default"' "$out/gpt_sum.forward.json" ||
  fail "gpt_sum: the default loss is no longer aten.sum.default"
"$overlap" exec "$out/gpt_sum.forward.json" --backward-graph "$out/gpt_sum.backward.json" \
  --weights "$out/gpt_sum.safetensors" --save "$out/gpt_sum.out.safetensors" >"$out/exec.log" ||
  fail "gpt_sum: exec: $(tail -3 "$out/exec.log")"
"$py" -m overlap_export.compare "$out/gpt_sum.forward.json" "$out/gpt_sum.safetensors" \
  "$out/gpt_sum.out.safetensors" || fail "gpt_sum: the executor differs from torch"
# In float64 (exec --double) against torch's float64 (ref64/): within 1e-9.
"$overlap" exec "$out/gpt_sum.forward.json" --backward-graph "$out/gpt_sum.backward.json" \
  --weights "$out/gpt_sum.safetensors" --save "$out/gpt_sum.out64.safetensors" --double \
  >"$out/exec.log" || fail "gpt_sum: exec --double: $(tail -3 "$out/exec.log")"
"$py" -m overlap_export.compare "$out/gpt_sum.forward.json" "$out/gpt_sum.safetensors" \
  "$out/gpt_sum.out64.safetensors" --float64 --tolerance 1e-9 ||
  fail "gpt_sum: the executor in float64 differs from torch's float64"

# Training against torch: the small GPT, 5 steps of SGD (lr 0.1) and of AdamW (lr 1e-3,
# betas 0.9 / 0.999, eps 1e-8, weight decay 0.01) on the batches of the exporter's
# --train-data file (global batch 4), which also holds torch's losses and trained
# parameters: single-process `overlap train` (the batch-4 graph), then 2-rank DDP and 2-rank
# ZeRO-3 under every scheduler (the batch-2 graph: each rank its 2 rows); every parameter
# and every step's loss within 1e-4 * max|torch| (1e-3 for AdamW).
start=$(date +%s)
gpt=overlap_export.testing.small_gpt:small_gpt
"$py" -m overlap_export "$gpt" --input 4x16:int64:64 --aot --loss ce -o "$out/gpt4" \
  --train-data "$out/sgd.safetensors" --optimizer sgd --lr 0.1 >/dev/null ||
  fail "small_gpt: --train-data sgd"
"$py" -m overlap_export "$gpt" --input 4x16:int64:64 --aot --loss ce -o "$out/gpt4b" \
  --train-data "$out/adamw.safetensors" --optimizer adamw --lr 1e-3 >/dev/null ||
  fail "small_gpt: --train-data adamw"
"$py" -m overlap_export "$gpt" --input 2x16:int64:64 --aot --loss ce -o "$out/gpt2" >/dev/null ||
  fail "small_gpt: the per-rank export"
# Two exports of one model are byte-identical (torch 1.13 orders saved values by object id;
# the exporter re-orders them).
for f in forward backward; do
  cmp -s "$out/gpt4.$f.json" "$out/gpt4b.$f.json" || fail "two exports differ: $f"
done
trained() {  # what, optimizer, output, log
  local tol=1e-4
  [ "$2" = adamw ] && tol=1e-3
  "$py" -m overlap_export.compare --trained "$out/$2.safetensors" "$3" --losses "$4" \
    --tolerance "$tol" || fail "$1 with $2 differs from torch"
  echo "export_test: $1 with $2 matches torch"
}
for opt in sgd adamw; do
  flags=(--optimizer "$opt" --lr 0.1 --momentum 0)
  [ "$opt" = adamw ] && flags=(--optimizer adamw --lr 1e-3 --weight-decay 0.01)
  d="$out/$opt.safetensors"
  "$overlap" train --graph "$out/gpt4.forward.json" --backward-graph "$out/gpt4.backward.json" \
    --weights "$d" --data "$d" --steps 5 "${flags[@]}" --save "$out/t.safetensors" \
    >"$out/t.log" 2>&1 || fail "train $opt: $(tail -3 "$out/t.log")"
  trained "overlap train" "$opt" "$out/t.safetensors" "$out/t.log"
  runs=("ddp ddp")
  for s in $schedulers; do runs+=("zero3 $s"); done
  for r in "${runs[@]}"; do
    read -r strategy algorithm <<<"$r"
    extra=()
    [ "$strategy" = zero3 ] && extra=(--algorithm "$algorithm")
    "$overlap" run --nproc 2 --strategy "$strategy" "${extra[@]}" \
      --graph "$out/gpt2.forward.json" --backward-graph "$out/gpt2.backward.json" \
      --weights "$d" --data "$d" --steps 5 "${flags[@]}" --save "$out/r.safetensors" \
      >"$out/r.log" 2>&1 || fail "run $strategy $algorithm $opt: $(tail -3 "$out/r.log")"
    trained "2-rank $strategy ($algorithm)" "$opt" "$out/r.safetensors" "$out/r.log"
  done
done
# A batch-norm model in training mode: its running statistics updated each step, as torch
# does, by train (the batch-4 graph, torch's one-process run) and by 2-rank DDP and 2-rank
# ZeRO-3 (the batch-2 graph; torch's run as two data-parallel ranks, --train-ranks 2: each
# rank normalizes by its own rows' statistics, rank 0's buffers kept); the trained
# parameters, the buffers and every loss within 1e-4 of torch's.
bn=overlap_export.testing.tiny_models:batch_norm_net
"$py" -m overlap_export "$bn" --input 4x3x8x8 --aot --loss ce --train -o "$out/bn4" \
  --train-data "$out/bn1.safetensors" >/dev/null || fail "batch norm: --train-data"
"$py" -m overlap_export "$bn" --input 4x3x8x8 --aot --loss ce --train -o "$out/bn4b" \
  --train-data "$out/bn2.safetensors" --train-ranks 2 >/dev/null ||
  fail "batch norm: --train-data --train-ranks 2"
"$py" -m overlap_export "$bn" --input 2x3x8x8 --aot --loss ce --train -o "$out/bn2" \
  >/dev/null || fail "batch norm: the per-rank export"
grep -Eq '"updates_buffer": ?"bn1.running_mean"' "$out/bn4.forward.json" ||
  fail "batch norm: no running-statistics update in the forward"
sgd=(--optimizer sgd --lr 0.1 --momentum 0)
"$overlap" train --graph "$out/bn4.forward.json" --backward-graph "$out/bn4.backward.json" \
  --weights "$out/bn1.safetensors" --data "$out/bn1.safetensors" --steps 5 "${sgd[@]}" \
  --save "$out/bt.safetensors" >"$out/bt.log" 2>&1 || fail "batch norm train: $(tail -3 "$out/bt.log")"
"$py" -m overlap_export.compare --trained "$out/bn1.safetensors" "$out/bt.safetensors" \
  --losses "$out/bt.log" | tee "$out/bt.cmp" || fail "batch norm: train differs from torch"
# 10 parameters, 6 buffers (2 running means, variances, batch counts), 5 losses.
grep -q "compare: 21 of 21 tensors" "$out/bt.cmp" || fail "batch norm: the buffers were not compared"
# The same training in float64 (train --double: parameters, buffers and update in float64)
# against torch's float64 training (ref64/ in the data file): within 1e-8 (the losses are
# printed to 9 digits), where the float32 run is not (float32 round-off is ~1e-7), so the
# float64 comparison tells them apart.
"$overlap" train --graph "$out/bn4.forward.json" --backward-graph "$out/bn4.backward.json" \
  --weights "$out/bn1.safetensors" --data "$out/bn1.safetensors" --steps 5 "${sgd[@]}" \
  --double --save "$out/bt64.safetensors" >"$out/bt64.log" 2>&1 ||
  fail "batch norm train --double: $(tail -3 "$out/bt64.log")"
"$py" -m overlap_export.compare --trained "$out/bn1.safetensors" "$out/bt64.safetensors" \
  --losses "$out/bt64.log" --float64 --tolerance 1e-8 ||
  fail "batch norm: train --double differs from torch's float64 training"
if "$py" -m overlap_export.compare --trained "$out/bn1.safetensors" "$out/bt.safetensors" \
  --float64 --tolerance 1e-8 >/dev/null; then
  fail "batch norm: the float32 run passes a 1e-8 float64 comparison (ref64/ is not float64)"
fi
for strategy in ddp zero3; do
  "$overlap" run --nproc 2 --strategy "$strategy" --graph "$out/bn2.forward.json" \
    --backward-graph "$out/bn2.backward.json" --weights "$out/bn2.safetensors" \
    --data "$out/bn2.safetensors" --steps 5 "${sgd[@]}" --save "$out/br.safetensors" \
    >"$out/br.log" 2>&1 || fail "batch norm run $strategy: $(tail -3 "$out/br.log")"
  "$py" -m overlap_export.compare --trained "$out/bn2.safetensors" "$out/br.safetensors" \
    --losses "$out/br.log" || fail "batch norm: 2-rank $strategy differs from torch"
  echo "export_test: batch norm, 2-rank $strategy matches torch (parameters, buffers, losses)"
done
# One batch norm applied twice per forward: its statistics updated twice per step, the
# second from the first (and num_batches_tracked counting 2), as torch does.
sbn=overlap_export.testing.tiny_models:shared_batch_norm
"$py" -m overlap_export "$sbn" --input 4x4x5x5 --aot --loss ce --train -o "$out/sbn" \
  --train-data "$out/sbn.safetensors" --train-steps 3 >/dev/null || fail "shared batch norm: export"
"$overlap" train --graph "$out/sbn.forward.json" --backward-graph "$out/sbn.backward.json" \
  --weights "$out/sbn.safetensors" --data "$out/sbn.safetensors" --steps 3 "${sgd[@]}" \
  --save "$out/sbt.safetensors" >"$out/sbt.log" 2>&1 || fail "shared batch norm: train"
"$py" -m overlap_export.compare --trained "$out/sbn.safetensors" "$out/sbt.safetensors" \
  --losses "$out/sbt.log" || fail "shared batch norm: differs from torch"
# A training file without the buffers: the missing tensor is named by its key.
"$py" - "$out/bn1.safetensors" "$out/nobuf.safetensors" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
body = data[8 + n:]
kept, out, at = {}, b"", 0
for k, v in header.items():
    if k == "__metadata__" or k.startswith("buffer/"):
        continue
    b, e = v["data_offsets"]
    kept[k] = dict(v, data_offsets=[at, at + e - b])
    out += body[b:e]
    at += e - b
h = json.dumps(kept).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + out)
PY
if "$overlap" train --graph "$out/bn4.forward.json" --backward-graph "$out/bn4.backward.json" \
    --weights "$out/nobuf.safetensors" --data "$out/nobuf.safetensors" --steps 1 "${sgd[@]}" \
    >"$out/nobuf.log" 2>&1; then
  fail "batch norm: a file without buffers trained"
fi
grep -q "missing input 'buffer/bn1.running_mean'" "$out/nobuf.log" ||
  fail "batch norm: the missing buffer is not named: $(tail -2 "$out/nobuf.log")"
echo "export_test: training ok ($(( $(date +%s) - start )) s)"

# A non-finite constant (a mask's -inf): written as {"$float": "-inf"} (docs/format.md), read
# back by overlap, and run: the loss and the gradient match torch.
cat >"$out/neginf.py" <<'PY'
import torch
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.linspace(0.5, 2.0, 4))
    def forward(self, x):
        keep = torch.arange(4) < 3
        return torch.softmax((x * self.w).masked_fill(~keep, float("-inf")), -1)
def make():
    return M()
PY
(cd "$out" && PYTHONPATH="$PYTHONPATH:$out" "$py" -m overlap_export neginf:make --input 2x4 \
   --aot --loss mse -o "$out/neginf" --weights "$out/neginf.safetensors" --reference \
   >/dev/null 2>"$out/neginf.err") || fail "-inf: export: $(cat "$out/neginf.err")"
grep -Eq '\{"\$float": ?"-inf"\}' "$out/neginf.forward.json" || fail "-inf not written as \$float"
"$overlap" exec "$out/neginf.forward.json" --backward-graph "$out/neginf.backward.json" \
  --weights "$out/neginf.safetensors" --save "$out/neginf_out.safetensors" >/dev/null ||
  fail "-inf: exec"
"$py" -m overlap_export.compare "$out/neginf.forward.json" "$out/neginf.safetensors" \
  "$out/neginf_out.safetensors" || fail "-inf: the executor differs from torch"

# Models whose state stretches the export (tools/overlap_export/testing/tiny_models.py), in
# the executor against torch: weight norm (fc1 by rows, ATen's fused pair; fc2 by the whole
# weight), label smoothing against class probabilities (its backward reads constants of its
# own, passed through the forward), a model casting its input to float32 (its float64 copy
# computes the cast ops in float64, with a one-line note, so that ours in float64 matches
# torch's float64 exactly as for any model). name | kwargs | input | loss
# (label smoothing's model returns its loss: the exporter's is its sum).
tiny=overlap_export.testing.tiny_models
# A table kept as a plain attribute (read as a buffer) and a module reachable by two paths
# (its slot swapped once) train as torch does.
for m in "weight_normed|{}|4x4|ce" "label_smoothing|{\"soft\": true}|2x4|sum" \
         "float32_inside|{}|4x4|ce" "plain_table|{}|4x4|ce" "shared_module|{}|4x4|ce"; do
  IFS='|' read -r name kwargs input loss <<<"$m"
  "$py" -m overlap_export "$tiny:$name" --kwargs "$kwargs" --input "$input" --aot --loss "$loss" \
    -o "$out/$name" --weights "$out/$name.safetensors" --reference >/dev/null \
    2>"$out/$name.err" || fail "$name: export: $(cat "$out/$name.err")"
  ! grep -q Traceback "$out/$name.err" || fail "$name: a traceback: $(cat "$out/$name.err")"
  "$overlap" exec "$out/$name.forward.json" --backward-graph "$out/$name.backward.json" \
    --weights "$out/$name.safetensors" --save "$out/$name.out.safetensors" >"$out/exec.log" ||
    fail "$name: exec: $(tail -3 "$out/exec.log")"
  "$py" -m overlap_export.compare "$out/$name.forward.json" "$out/$name.safetensors" \
    "$out/$name.out.safetensors" || fail "$name: the executor differs from torch"
done
grep -q "1 tensor attribute(s) that are neither parameters nor buffers read as buffers: table" \
  "$out/plain_table.err" || fail "plain_table: no note on the lifted table: $(cat "$out/plain_table.err")"
grep -q "the model asks for float32 (or float16 / bfloat16) results inside" \
  "$out/float32_inside.err" ||
  fail "float32_inside: no note on the float64 reference: $(cat "$out/float32_inside.err")"
"$overlap" exec "$out/float32_inside.forward.json" --double \
  --backward-graph "$out/float32_inside.backward.json" --weights "$out/float32_inside.safetensors" \
  --save "$out/float32_inside.out64.safetensors" >"$out/exec.log" ||
  fail "float32_inside: exec --double: $(tail -3 "$out/exec.log")"
"$py" -m overlap_export.compare "$out/float32_inside.forward.json" \
  "$out/float32_inside.safetensors" "$out/float32_inside.out64.safetensors" --float64 \
  --tolerance 1e-12 || fail "float32_inside: float64 differs from torch's float64"
# Convolutions of 1 and 3 spatial dimensions and mixed dtypes (tiny_models.py): every file of
# both exports passes `inspect --shapes` (the dtypes torch states are graph/type_promotion.h's:
# a bool mask's sum int64, float32 * bool float32, an integer true division float32); the
# masked model, which has no convolution (the CPU kernels run 2-d ones), runs in the executor
# against torch.
"$py" -m overlap_export "$tiny:convs_and_masks" --input 2x3x16 --input 1x2x4x8x8 --aot \
  -o "$out/convs" >/dev/null || fail "convs_and_masks: export"
"$py" -m overlap_export "$tiny:masked_mean" --input 4x4 --input 4:int64:10 --aot \
  -o "$out/masked" --weights "$out/masked.safetensors" --reference >/dev/null ||
  fail "masked_mean: export"
for f in "$out"/{convs,masked}{,.forward,.backward}.json; do
  report=$("$overlap" inspect --shapes "$f" 2>&1) ||
    fail "$f does not pass the shape check: $(tail -1 <<<"$report")"
done
grep -q '"target":"aten.sum.default","args":\["%gt"\]' "$out/convs.forward.json" ||
  fail "convs_and_masks: no bool sum in the forward"
"$overlap" exec "$out/masked.forward.json" --backward-graph "$out/masked.backward.json" \
  --weights "$out/masked.safetensors" --save "$out/masked.out.safetensors" >"$out/exec.log" ||
  fail "masked_mean: exec: $(tail -3 "$out/exec.log")"
"$py" -m overlap_export.compare "$out/masked.forward.json" "$out/masked.safetensors" \
  "$out/masked.out.safetensors" || fail "masked_mean: the executor differs from torch"
echo "export_test: convolutions of 1 and 3 dimensions and mixed dtypes ok"

# Weight norm trained (3 SGD steps): torch recomputes each weight from the trained g and v.
"$py" -m overlap_export "$tiny:weight_normed" --input 4x4 --aot --loss ce -o "$out/wnt" \
  --train-data "$out/wnt.safetensors" --train-steps 3 >/dev/null || fail "weight norm: --train-data"
"$overlap" train --graph "$out/wnt.forward.json" --backward-graph "$out/wnt.backward.json" \
  --weights "$out/wnt.safetensors" --data "$out/wnt.safetensors" --steps 3 "${sgd[@]}" \
  --save "$out/wnt.out.safetensors" >"$out/wnt.log" 2>&1 ||
  fail "weight norm: train: $(tail -3 "$out/wnt.log")"
"$py" -m overlap_export.compare --trained "$out/wnt.safetensors" "$out/wnt.out.safetensors" \
  --losses "$out/wnt.log" || fail "weight norm: training differs from torch"

# A constructor that does not import: exit 1, the step named, no file.
if "$py" -m overlap_export no_such_module:model --input 2 -o "$out/bad" 2>"$out/bad.err"; then
  fail "an unimportable model exported"
fi
grep -q "^overlap_export: import: ModuleNotFoundError" "$out/bad.err" ||
  fail "the import error does not name the step: $(cat "$out/bad.err")"
! ls "$out"/bad* 2>/dev/null | grep -q json || fail "a partial file was written"
echo "export_test: ok"
