#!/usr/bin/env bash
# Regenerates docs/gallery.md: every model the exporter is tested on, through every pass.
#
#   tools/gallery.sh [OUT]     (default docs/gallery.md; needs torch: tools/bootstrap.sh
#                               --with-torch; about two minutes on two cores)
#
# Per model: export (tools/overlap_export, random weights, the inputs below), `overlap
# annotate` (the exported graphs have no device times), then
#   - parameters (elements over unique storages) and nodes of the AOT forward / backward;
#   - DDP buckets at the default 25 MiB cap in both modes (module-style graphs only);
#   - ZeRO-3 by every scheduler on the AOT forward and backward: the simulated peak memory
#     and step (H100 cost model, 32 ranks at 50 GB/s, 20 us: the CLI's defaults);
#   - the executor (`overlap exec`, CPU kernels) on the forward and backward: wall time;
#   - the agreement with torch: the loss and every gradient against torch's own for the same
#     weights and inputs, the worst max|a-b| / max|torch| over the tensors.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/gallery.md}
source tools/python.sh
py="$OVERLAP_PY"
bazel build //tools:overlap >/dev/null 2>&1 || { bazel build //tools:overlap; exit 1; }
overlap=$PWD/bazel-bin/tools/overlap
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PYTHONPATH="$PWD/tools${PYTHONPATH:+:$PYTHONPATH}"

# name | constructor | kwargs | input | compare with torch (weights file)
models=(
  "resnet18|torchvision.models:resnet18|{\"num_classes\": 10}|2x3x32x32|yes"
  "mobilenet_v2|torchvision.models:mobilenet_v2|{\"num_classes\": 10}|2x3x32x32|yes"
  "vit_b_16|torchvision.models:vit_b_16|{\"image_size\": 64}|1x3x64x64|no"
  "small_gpt|overlap_export.testing.small_gpt:small_gpt|{}|2x16:int64:64|yes"
  "small_vit|torchvision.models.vision_transformer:VisionTransformer|{\"image_size\": 32, \"patch_size\": 16, \"num_layers\": 2, \"num_heads\": 4, \"hidden_dim\": 64, \"mlp_dim\": 128, \"num_classes\": 10}|2x3x32x32|yes"
)
schedulers=$("$overlap" schedule --list-algorithms | awk '{print $1}')
nodes() { "$py" -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["nodes"]))' "$1"; }
# "peak memory X, step Y" of a schedule report, as "X | Y".
peak_step() {
  sed -n 's/.*peak memory \([^,]*\), step \([0-9.]* [a-z]*\).*/\1 | \2/p' <<<"$1" | head -1
}

summary=()
schedules=()
for m in "${models[@]}"; do
  IFS='|' read -r name ctor kwargs input compare <<<"$m"
  echo "gallery: $name" >&2
  extra=()
  [ "$compare" = yes ] && extra=(--weights "$work/$name.safetensors" --reference)
  log=$("$py" -m overlap_export "$ctor" --kwargs "$kwargs" --input "$input" --aot --loss ce \
          -o "$work/$name" "${extra[@]}" 2>&1) || { echo "$log" >&2; exit 1; }
  params=$(grep -o 'parameters: [0-9,]*' <<<"$log" | head -1 | cut -d' ' -f2)
  path=$(grep 'parameters:' <<<"$log" | sed 's/^overlap_export: [^:]*: \([^;]*\);.*/\1/')
  for f in "$work/$name".*json "$work/$name.json"; do
    [ -e "$f" ] || continue
    "$overlap" annotate "$f" -o "$f" >/dev/null
  done
  fwd="$work/$name.forward.json"
  bwd="$work/$name.backward.json"
  # Without a module-style graph, the default mode on the AOT forward's lifted parameters
  # (the reference mode, as PyTorch's DDPOptimizer, sees only module-owned ones).
  b=$("$overlap" partition "$fwd" --mode default | grep -o '^[0-9]* buckets')
  buckets="${b% buckets} / — (AOT forward)"
  if [ -e "$work/$name.json" ]; then
    d=$("$overlap" partition "$work/$name.json" --mode default | grep -o '^[0-9]* buckets')
    r=$("$overlap" partition "$work/$name.json" --mode reference | grep -o '^[0-9]* buckets')
    buckets="${d% buckets} / ${r% buckets}"
  fi
  exec_args=("$fwd" --backward-graph "$bwd")
  [ "$compare" = yes ] && exec_args+=(--weights "$work/$name.safetensors" --save "$work/$name.out")
  run=$("$overlap" exec "${exec_args[@]}" 2>&1) || { echo "$run" >&2; exit 1; }
  ftime=$(sed -n 's/^forward: [0-9]* nodes in \([0-9.]* [a-z]*\);.*/\1/p' <<<"$run")
  btime=$(sed -n 's/^backward: [0-9]* nodes in \([0-9.]* [a-z]*\);.*/\1/p' <<<"$run")
  agree="not compared (export-only)"
  if [ "$compare" = yes ]; then
    c=$("$py" -m overlap_export.compare "$fwd" "$work/$name.safetensors" "$work/$name.out")
    agree=$(sed -n 's/^compare: \([0-9]*\) of \([0-9]*\) tensors within [0-9.e-]* (worst \([^:]*\):.*/\1 of \2 within 1e-4, worst \3/p' <<<"$c")
  fi
  summary+=("| $name | $path | $params | $(nodes "$fwd") / $(nodes "$bwd") | $buckets | $ftime / $btime | $agree |")
  for s in $schedulers; do
    f=$(peak_step "$("$overlap" schedule "$fwd" --algorithm "$s")")
    b=$(peak_step "$("$overlap" schedule "$bwd" --backward --algorithm "$s")")
    schedules+=("| $name | $s | $f | $b |")
  done
  if [ "$name" = resnet18 ]; then
    for s in lookahead fast_free; do
      "$overlap" schedule "$bwd" --backward --algorithm "$s" \
        --svg "docs/images/gallery_resnet18_backward_$s.svg" >/dev/null
    done
  fi
done

torch_version=$("$py" -c 'import torch, torchvision; print(torch.__version__, "/ torchvision", torchvision.__version__)')
# tools/zoo.py's table (between its markers) is kept as it is: that script rewrites it.
zoo=""
if [ -e "$out" ] && grep -q '<!-- zoo:begin -->' "$out"; then
  zoo=$(sed -n '/<!-- zoo:begin -->/,/<!-- zoo:end -->/p' "$out")
fi
{
  echo "# Gallery: PyTorch models through every pass"
  echo
  echo "*Generated by \`tools/gallery.sh\` on $(date -u +%Y-%m-%d) (torch $torch_version,"
  echo "$(nproc) cores). Do not edit by hand: rerun the script.*"
  echo
  echo "Each model is exported by \`tools/overlap_export\` (docs/interop.md) with random weights,"
  echo "annotated by \`overlap annotate\` (the roofline cost model, docs/cost-model.md: an H100"
  echo "SXM), and run through the passes with the CLI's defaults. The small GPT is"
  echo "\`tools/overlap_export/testing/small_gpt.py\`; the small ViT is torchvision's"
  echo "\`VisionTransformer\` with 2 layers, hidden 64, image 32, patch 16. Inputs: resnet18,"
  echo "mobilenet_v2 and the small ViT a batch of 2 at 32x32; vit_b_16 one image at 64x64;"
  echo "the small GPT 2 x 16 tokens. The loss is cross-entropy."
  echo
  echo "## Models"
  echo
  echo "- **parameters**: elements over unique storages (tied weights once), as the exporter and"
  echo "  \`overlap inspect\` both count them."
  echo "- **nodes**: the AOT forward / backward graphs (ATen ops, torch 1.13's decomposition)."
  echo "- **DDP buckets**: \`overlap partition\` at the 25 MiB cap, default / reference mode"
  echo "  (docs/partition.md) on the module-style graph; torch.fx cannot trace the ViTs"
  echo "  symbolically, so theirs are the default mode's on the AOT forward (lifted parameters:"
  echo "  the reference mode, like PyTorch's DDPOptimizer, buckets only module-owned ones)."
  echo "- **executor**: \`overlap exec\` on the CPU kernels, forward / backward wall time"
  echo "  (one run; these machines are noisy)."
  echo "- **vs torch**: the loss and every parameter gradient against torch's for the same"
  echo "  weights and inputs, each within max|a-b| <= 1e-4 max|torch|; the worst ratio shown."
  echo
  echo "| model | exported as | parameters | nodes (fwd / bwd) | DDP buckets (default / reference) | executor (fwd / bwd) | vs torch |"
  echo "|---|---|---:|---:|---:|---:|---|"
  printf '%s\n' "${summary[@]}"
  echo
  echo "## ZeRO-3 by scheduler"
  echo
  echo "\`overlap schedule\` on the annotated AOT forward and backward (ZeRO-3 allgathers,"
  echo "releases and reduce-scatters inserted, the schedule verified, then simulated on two"
  echo "streams: docs/schedule.md). Peak memory is the simulated peak of activations and"
  echo "gathered parameters on one rank of 32; the step is the simulated time, which for"
  echo "models this small is almost all communication (20 us per collective at 50 GB/s),"
  echo "so what separates the schedulers is how much of it they overlap and batch. No memory"
  echo "budget is set, so in the backward lookahead (ours) keeps parameters resident (selective"
  echo "unsharding: gathered once per step, not again for the backward) and buckets the"
  echo "reduce-scatters: hence its shorter backward step and higher backward peak; with"
  echo "\`--memory-limit\` it keeps fewer (docs/schedule.md)."
  echo
  echo "| model | scheduler | forward peak | forward step | backward peak | backward step |"
  echo "|---|---|---:|---:|---:|---:|"
  printf '%s\n' "${schedules[@]}"
  echo
  echo "resnet18's backward as DeepCompile's fast_free runs it (one reduce-scatter per"
  echo "gradient, each after the compute that produces it) and as ours (lookahead) does"
  echo "(parameters resident, the reduce-scatters in buckets): the compute and communication"
  echo "streams above the memory curve. At this batch the compute is a sliver of the step."
  echo
  echo "![resnet18 backward, fast_free](images/gallery_resnet18_backward_fast_free.svg)"
  echo
  echo "![resnet18 backward, lookahead](images/gallery_resnet18_backward_lookahead.svg)"
  if [ -n "$zoo" ]; then
    echo
    echo "$zoo"
  fi
} >"$out"
echo "gallery: wrote $out" >&2
