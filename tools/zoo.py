#!/usr/bin/env python3
"""The model zoo: PyTorch models through every pass of overlap, checked against torch.

    tools/zoo.py                 every model; rewrites docs/gallery.md's zoo table
    tools/zoo.py --quick         the test's subset; exit 1 when any model fails
    tools/zoo.py resnet18 lstm   the named models only (no file written)
    tools/zoo.py --capture export hf_llama   the pair captured by torch.export instead

Per model (docs/gallery.md, "Model zoo"): export (tools/overlap_export: the AOT pair, random
weights, torch's float32 and float64 reference on the same inputs, cross-entropy over the
output's last dimension); `overlap annotate` and `overlap inspect --shapes` on every graph;
`overlap partition` (the module-style graph, else the AOT forward); `overlap schedule` by
every scheduler, forward and backward; `overlap exec` of the pair on torch's weights, then
`overlap_export.compare` (the loss and every gradient; docs/interop.md's rule; every op of
the AOT pair must have a cost formula, none the memory-only fallback); three SGD steps and
three AdamW steps in
`overlap train` against torch's own training (`--train-data`); where float32 differs, the
same run in float64 against torch's float64 (round-off, docs/interop.md). A model that
fails names the step and the first line of its error. Needs torch (tools/bootstrap.sh
--with-torch) and the built CLI (bazel build //tools:overlap; the script builds it when
OVERLAP is not set).
"""

import argparse
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import doc_block  # tools/doc_block.py, beside this script
from overlap_python import use_overlap_python  # beside it too

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(ROOT, "tools")
PY = use_overlap_python(__file__)  # the Python with torch (tools/python.sh)
MODULES = "overlap_export.testing.zoo_modules"
TEN = '{"num_classes": 10}'
TOKENS = "2x6:int64:11"
IMAGES = "2x3x16x16"

# torch.nn layers in small models (tools/overlap_export/testing/zoo_modules.py).
LAYERS = [
    ("lstm", f"{MODULES}:recurrent", "{}", TOKENS,
     "nn.LSTM, 2 layers, both directions, batch-first"),
    ("gru", f"{MODULES}:recurrent", '{"kind": "GRU", "batch_first": false}', TOKENS,
     "nn.GRU, 2 layers, both directions, sequence-first"),
    ("rnn", f"{MODULES}:recurrent",
     '{"kind": "RNN", "bidirectional": false, "layers": 3}', TOKENS,
     "nn.RNN (tanh), 3 layers, one direction"),
    ("multihead_attention", f"{MODULES}:attention", "{}", TOKENS,
     "nn.MultiheadAttention, self-attention"),
    ("multihead_attention_causal", f"{MODULES}:attention", '{"causal": true}', TOKENS,
     "nn.MultiheadAttention with a -inf causal mask"),
    ("transformer_encoder", f"{MODULES}:transformer", "{}", TOKENS,
     "nn.TransformerEncoderLayer (post-norm, ReLU)"),
    ("transformer_decoder", f"{MODULES}:transformer",
     '{"decoder": true, "norm_first": true, "activation": "gelu"}', TOKENS,
     "nn.TransformerDecoderLayer over an encoder layer (pre-norm, GELU)"),
    ("conv_layers_nearest", f"{MODULES}:conv_layers", "{}", IMAGES,
     "nn.GroupNorm, nn.Dropout (evaluation), nn.ConvTranspose2d, nn.Upsample nearest"),
    ("conv_layers_bilinear", f"{MODULES}:conv_layers", '{"mode": "bilinear"}', IMAGES,
     "as above, nn.Upsample bilinear"),
    ("interpolate_bilinear", f"{MODULES}:interpolate", "{}", IMAGES,
     "F.interpolate to 11x13, bilinear"),
    ("interpolate_bilinear_aligned", f"{MODULES}:interpolate", '{"align_corners": true}',
     IMAGES, "F.interpolate to 11x13, bilinear, align_corners"),
    ("interpolate_nearest", f"{MODULES}:interpolate", '{"mode": "nearest"}', IMAGES,
     "F.interpolate to 11x13, nearest"),
]

# One small model per operator class users' models reach
# (tools/overlap_export/testing/op_modules.py): `--ops` runs these (//tools:op_zoo_test).
OPS_MODULES = "overlap_export.testing.op_modules"
SIGNALS, VOLUMES = "2x3x16", "2x3x4x8x8"
OPS = [
    ("op_conv1d", f"{OPS_MODULES}:Conv1d", "{}", SIGNALS,
     "nn.Conv1d (groups, stride), 1-D max / average / adaptive pooling"),
    ("op_conv3d", f"{OPS_MODULES}:Conv3d", "{}", VOLUMES,
     "nn.Conv3d, 3-D max pooling (indices), 3-D average pooling"),
    ("op_adaptive_max", f"{OPS_MODULES}:AdaptiveMax", "{}", IMAGES,
     "nn.AdaptiveMaxPool2d to 3x3 (uneven windows)"),
    ("op_adaptive_volume", f"{OPS_MODULES}:AdaptiveVolume", "{}", VOLUMES,
     "nn.AdaptiveMaxPool3d, nn.AdaptiveAvgPool3d, nn.AdaptiveMaxPool1d"),
    ("op_scatter", f"{OPS_MODULES}:Scatter", "{}", TOKENS,
     "gather, scatter, scatter_add, index_add, select_scatter"),
    ("op_cumsum", f"{OPS_MODULES}:Cumsum", "{}", TOKENS, "cumsum (its backward: flip)"),
    ("op_embedding_bag_sum", f"{OPS_MODULES}:EmbeddingBag", "{}", TOKENS,
     "nn.EmbeddingBag, mode sum, offsets"),
    ("op_embedding_bag_mean", f"{OPS_MODULES}:EmbeddingBag", '{"mode": "mean"}', TOKENS,
     "nn.EmbeddingBag, mode mean"),
    ("op_embedding_bag_max", f"{OPS_MODULES}:EmbeddingBag", '{"mode": "max"}', TOKENS,
     "nn.EmbeddingBag, mode max"),
    ("op_repeat_interleave", f"{OPS_MODULES}:RepeatInterleave", "{}", TOKENS,
     "repeat_interleave over heads (grouped-query attention's expansion)"),
    ("op_unary", f"{OPS_MODULES}:Unary", "{}", TOKENS, "sin, cos, abs, log"),
    ("op_activations", f"{OPS_MODULES}:Activations", "{}", IMAGES,
     "nn.PReLU, leaky_relu, pixel_shuffle, pixel_unshuffle"),
    ("op_max_reduce", f"{OPS_MODULES}:MaxReduce", "{}", TOKENS, "max over a dimension, amax"),
    ("op_factories", f"{OPS_MODULES}:Factories", "{}", TOKENS,
     "ones, empty, arange(start, end, step), triu_indices, a dtype cast"),
    ("op_dropout", f"{OPS_MODULES}:Dropout", "{}", TOKENS,
     "nn.Dropout(0.25) in training: compared on torch's own masks"),
]
# Hugging Face transformers families at small random configurations built in code
# (tools/overlap_export/testing/hf_models.py; nothing downloaded).
HF_MODULES = "overlap_export.testing.hf_models"
HF_TOKENS, HF_IMAGES = "2x8:int64:64", "2x3x32x32"
TRANSFORMERS = [(f"hf_{n}", f"{HF_MODULES}:{n}", "{}", shape, what) for n, shape, what in [
    ("gpt2", HF_TOKENS, "GPT-2 (GPT2LMHeadModel): learned positions, Conv1D projections"),
    ("llama", HF_TOKENS, "Llama: RMS norm, rotary positions, grouped-query attention, SwiGLU"),
    ("mistral", HF_TOKENS, "Mistral: as Llama, a sliding-window causal mask"),
    ("qwen2", HF_TOKENS, "Qwen2: as Llama, biases on q / k / v"),
    ("gemma", HF_TOKENS, "Gemma: one key-value head, scaled embeddings, GELU gating"),
    ("phi3", HF_TOKENS, "Phi-3: fused qkv and gate-up projections"),
    ("bert", HF_TOKENS, "BERT (masked LM): post-norm encoder, token types"),
    ("roberta", HF_TOKENS, "RoBERTa (masked LM): positions from the padding mask"),
    ("distilbert", HF_TOKENS, "DistilBERT (masked LM)"),
    ("albert", HF_TOKENS, "ALBERT (masked LM): one layer shared, factorised embeddings"),
    ("t5", HF_TOKENS, "T5: encoder-decoder, relative position buckets, RMS norm"),
    ("bart", HF_TOKENS, "BART: encoder-decoder, learned positions"),
    ("whisper", "2x16x16", "Whisper: 1-D convolution stem over log-mel frames, decoder"),
    ("wav2vec2", "2x400", "wav2vec2 (CTC): 1-D convolutions on audio, weight-normed "
                          "positional convolution"),
    ("vit", HF_IMAGES, "ViT (image classification)"),
    ("swin", HF_IMAGES, "Swin: shifted windows, relative position bias"),
    ("convnext", HF_IMAGES, "ConvNeXt (transformers'): depthwise 7x7, layer scale"),
    ("clip_text", HF_TOKENS, "CLIP's text tower with its projection"),
    ("clip_vision", HF_IMAGES, "CLIP's vision tower with its projection"),
    ("opt", HF_TOKENS, "OPT: learned positions offset by 2, ReLU"),
    ("gpt_neox", HF_TOKENS, "GPT-NeoX: parallel attention and MLP, partial rotary"),
    ("falcon", HF_TOKENS, "Falcon: multi-query attention, parallel blocks"),
    ("bloom", HF_TOKENS, "BLOOM: ALiBi position biases, embedding layer norm"),
    ("mixtral", HF_TOKENS, "Mixtral: mixture of 4 experts, top-2 routing (grouped products)"),
    ("qwen2_moe", HF_TOKENS, "Qwen2-MoE: routed experts beside a gated shared expert"),
    ("gemma2", HF_TOKENS, "Gemma 2: logit soft-capping, sandwich norms"),
    ("olmo", HF_TOKENS, "OLMo: non-parametric layer norm"),
    ("phi", HF_TOKENS, "Phi-1.5: parallel blocks, partial rotary, GELU"),
    ("deberta_v2", HF_TOKENS, "DeBERTa-v2 (masked LM): disentangled relative attention"),
    ("electra", HF_TOKENS, "ELECTRA (masked LM): factorised embeddings"),
    ("xlm_roberta", HF_TOKENS, "XLM-RoBERTa (masked LM)"),
    ("mbart", HF_TOKENS, "mBART: encoder-decoder, pre-norm"),
    ("pegasus", HF_TOKENS, "Pegasus: encoder-decoder, sinusoidal positions"),
    ("beit", HF_IMAGES, "BEiT: relative position bias, layer scale"),
    ("dinov2", HF_IMAGES, "DINOv2: interpolated position embeddings, layer scale"),
    ("segformer", HF_IMAGES, "SegFormer (classification): overlapping patches, reduced "
                             "attention"),
    ("qwen3", HF_TOKENS, "Qwen3: q / k RMS norms"),
    ("qwen3_moe", HF_TOKENS, "Qwen3-MoE: q / k norms, 4 experts, top-2"),
    ("olmoe", HF_TOKENS, "OLMoE: mixture of experts, q / k norms"),
    ("starcoder2", HF_TOKENS, "StarCoder2: grouped-query attention, biased layer norms"),
    ("gpt_bigcode", HF_TOKENS, "GPT-BigCode: multi-query attention"),
    ("cohere", HF_TOKENS, "Cohere: parallel blocks, interleaved rotary, logit scale"),
    ("granite", HF_TOKENS, "Granite: residual, attention and logit multipliers"),
    ("olmo2", HF_TOKENS, "OLMo 2: post-norms, q / k norms"),
    ("nemotron", HF_TOKENS, "Nemotron: layer norm 1p, squared ReLU"),
    ("mamba", HF_TOKENS, "Mamba: selective state space scan (softplus time steps)"),
    ("mamba2", HF_TOKENS, "Mamba-2: chunked state space scan, gated RMS norm"),
    ("jamba", HF_TOKENS, "Jamba: Mamba and attention layers, mixture of experts"),
    ("modernbert", HF_TOKENS, "ModernBERT (masked LM): local and global attention, GeGLU"),
    ("siglip_vision", HF_IMAGES, "SigLIP's vision tower: attention pooling head"),
    ("convnextv2", HF_IMAGES, "ConvNeXt V2: global response normalization"),
    ("swinv2", HF_IMAGES, "Swin V2: cosine attention, log-spaced position MLP"),
    ("hubert", "2x400", "HuBERT (CTC): 1-D convolutions on audio"),
    ("wavlm", "2x400", "WavLM (CTC): gated relative position bias"),
    ("videomae", "2x4x3x32x32", "VideoMAE: tubelet (3-D) patches, a fixed sinusoidal table"),
]]
# timm families at their smallest variants, random weights, 10 classes.
TIMM = [(f"timm_{n}", "timm:create_model", json.dumps({"model_name": n, "num_classes": 10,
                                                         **extra}), shape, f"timm {n}")
        for n, shape, extra in [
            ("resnet10t", "2x3x64x64", {}),
            ("efficientnet_b0", "2x3x64x64", {}),
            ("mobilenetv3_small_050", "2x3x64x64", {}),
            ("convnext_atto", "2x3x64x64", {}),
            ("regnetx_002", "2x3x64x64", {}),
            ("vit_tiny_patch16_224", "2x3x32x32", {"img_size": 32}),
            ("deit_tiny_patch16_224", "2x3x32x32", {"img_size": 32}),
            ("swin_tiny_patch4_window7_224", "2x3x56x56", {"img_size": 56}),
            ("mixer_s32_224", "2x3x64x64", {"img_size": 64}),
            ("levit_128s", "2x3x64x64", {"img_size": 64}),
            ("poolformer_s12", "2x3x64x64", {}),
            ("maxvit_nano_rw_256", "2x3x64x64", {"img_size": 64}),
            ("efficientvit_b0", "2x3x64x64", {}),
            ("fastvit_t8", "2x3x64x64", {}),
            ("ghostnet_100", "2x3x64x64", {}),
            ("mobilevit_xxs", "2x3x64x64", {}),
            ("rexnet_100", "2x3x64x64", {}),
            ("repvgg_a0", "2x3x64x64", {}),
            ("edgenext_xx_small", "2x3x64x64", {}),
            ("coat_lite_tiny", "2x3x64x64", {"img_size": 64}),
            ("nfnet_l0", "2x3x64x64", {}),
            ("volo_d1_224", "2x3x64x64", {"img_size": 64}),
            ("crossvit_tiny_240", "2x3x240x240", {}),
            ("efficientformer_l1", "2x3x224x224", {}),
            ("mobilenetv4_conv_small", "2x3x64x64", {}),
            ("resnest14d", "2x3x64x64", {}),
            ("inception_next_atto", "2x3x64x64", {}),
            ("eva02_tiny_patch14_224", "2x3x56x56", {"img_size": 56}),
            ("gcvit_xxtiny", "2x3x64x64", {"img_size": 64}),
            ("hrnet_w18_small", "2x3x64x64", {}),
        ]]
# Export flags beyond the zoo's own, by model.
# timm's LeViT caches its attention biases (computed from parameters) on its first forward in
# evaluation mode, and reads the cache thereafter: a constant to the trace, without a
# gradient. In training mode it computes them each time.
EXPORT_FLAGS = {"op_dropout": ["--train"], "timm_levit_128s": ["--train"],
                "timm_efficientformer_l1": ["--train"]}

# Every classification constructor of torchvision 0.14's torchvision.models at a small size:
# a batch of 2 at 64x64, or the smallest size the model accepts.
SIZE = {
    "inception_v3": "2x3x75x75",  # its stem needs 75
    "maxvit_t": "2x3x224x224",  # 7x7 partitions at 1/32 scale: 224 is the smallest
}
KWARGS = {  # ViTs at their smallest legal image (one patch grid of 2x2)
    "vit_b_16": '{"num_classes": 10, "image_size": 32}',
    "vit_b_32": '{"num_classes": 10, "image_size": 64}',
    "vit_l_16": '{"num_classes": 10, "image_size": 32}',
    "vit_l_32": '{"num_classes": 10, "image_size": 64}',
}
TRAIN_STEPS = 3
# overlap train's flags for each optimizer the zoo compares (the exporter's --adamw-data
# trains torch's AdamW with the same learning rate, betas, eps and weight decay).
OPTIMIZER_FLAGS = {"SGD": ["--optimizer", "sgd", "--momentum", "0"],
                   "AdamW": ["--optimizer", "adamw", "--weight-decay", "0.01"]}
# Small enough that three steps on random weights stay stable (at 1e-2 densenet169's loss
# goes 2.8 -> 8.3 -> 2.2, and a chaotic run amplifies any rounding into the parameters).
TRAIN_LR = 1e-3
# Ours in float64 against torch's float64 (the fallback when float32 differs): float64
# round-off is ~1e-16, so this leaves ten orders of magnitude for its growth through a deep
# network, while a wrong kernel moves a gradient by far more.
FLOAT64_TOLERANCE = 1e-6
INPUTS = {"vit_b_16": "2x3x32x32", "vit_b_32": "2x3x64x64", "vit_l_16": "2x3x32x32",
          "vit_l_32": "2x3x64x64"}
# Not run, and why.
SKIPPED = {
    "regnet_y_128gf": "644 M parameters: torch's float64 AdamW reference holds its parameters, "
                      "gradients and two moments in float64 (21 GB) and the executor's float64 "
                      "training as much, on a machine of 23 GB; hours on 2 cores",
    "vit_h_14": "631 M parameters: as regnet_y_128gf",
}

# The test's subset (--quick): every layer model, torchvision models covering the operators
# each family adds, and transformers / timm families with operators of their own (rotary
# positions and grouped-query attention, relative position buckets, audio convolutions,
# patch embeddings, timm's layers), at sizes that keep the whole run near ten minutes on
# 2 cores beside the other tests. The larger classifiers (alexnet, densenet121,
# convnext_tiny, vit_b_32, swin_v2_t, efficientnet_b0, regnet_y_400mf: 40-320 s each there)
# run in the full table.
QUICK = [name for name, *_ in LAYERS] + [
    "squeezenet1_1", "shufflenet_v2_x0_5", "mnasnet0_5", "mobilenet_v3_small",
    "googlenet", "swin_t", "hf_llama", "hf_t5", "hf_whisper", "hf_vit", "hf_mixtral",
    "timm_convnext_atto"]


def torchvision_models():
    out = subprocess.run([PY, "-c", "import torchvision; print(' '.join("
                          "torchvision.models.list_models(module=torchvision.models)))"],
                         capture_output=True, text=True, check=True)
    rows = []
    for name in out.stdout.split():
        rows.append((name, f"torchvision.models:{name}", KWARGS.get(name, TEN),
                     INPUTS.get(name, SIZE.get(name, "2x3x64x64")), "torchvision"))
    return rows


def worst_of(text):
    """compare's summary, shortened: "worst 3.1e-15: name (change); 2 by float64's spread"."""
    m = re.search(r"^compare: [0-9]+ of [0-9]+ tensors within [^ ]+ \((worst .*)\)$", text,
                  re.M)
    return m.group(1) if m else text.strip().splitlines()[-1]


class Failed(Exception):
    def __init__(self, step, text):
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        # The last line naming an error (an exporter's notices come before its failure).
        why = next((ln for ln in reversed(lines) if "error" in ln.lower()),
                   lines[-1] if lines else "")
        super().__init__(f"{step}: {why[:300]}")


def run(step, cmd, timeout=3600):
    env = dict(os.environ)
    env["PYTHONPATH"] = TOOLS + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=TOOLS)
    if r.returncode < 0:  # a signal: on these machines, the kernel's out-of-memory killer
        sig = signal.Signals(-r.returncode).name
        raise Failed(step, f"killed by {sig}"
                     + (" (the machine's memory: the kernel's out-of-memory killer)"
                        if sig == "SIGKILL" else "") + (": " + r.stderr[-300:] if r.stderr else ""))
    if r.returncode != 0:
        raise Failed(step, r.stderr + r.stdout)
    return r.stdout + r.stderr


def one(overlap, name, ctor, kwargs, shape, work, capture="aot"):
    """Every pass on one model: a dict of its figures; raises Failed naming the step."""
    prefix = os.path.join(work, name)
    weights = prefix + ".safetensors"
    data = prefix + ".data.safetensors"
    adamw_data = prefix + ".adamw.safetensors"
    log = run("export", [PY, "-m", "overlap_export", ctor, "--kwargs", kwargs, "--input",
                         shape, "--aot", "--loss", "ce", "-o", prefix, "--weights", weights,
                         "--reference", "--train-data", data, "--train-steps",
                         str(TRAIN_STEPS), "--optimizer", "sgd", "--lr", str(TRAIN_LR),
                         "--adamw-data", adamw_data]
              + EXPORT_FLAGS.get(name, []) + ["--capture", capture])
    params = re.search(r"parameters: ([0-9,]+)", log).group(1)
    fwd, bwd = prefix + ".forward.json", prefix + ".backward.json"
    producer = json.load(open(fwd)).get("producer", {})
    torch_version = producer.get("torch", "?")
    graphs = [g for g in (prefix + ".json", fwd, bwd) if os.path.exists(g)]
    for g in graphs:
        ann = run("annotate", [overlap, "annotate", g, "-o", g])
        fallback = re.search(r"\(([0-9]+) by formula, ([0-9]+) by the memory-only fallback\)", ann)
        if fallback and int(fallback.group(2)) > 0 and g != prefix + ".json":
            raise Failed("annotate", "error: ops without a cost formula: " +
                         ", ".join(re.findall(r"^  ([A-Za-z_.0-9]+): [0-9]+$", ann, re.M)))
        run("inspect --shapes", [overlap, "inspect", g, "--shapes"])
    module = prefix + ".json"
    run("partition", [overlap, "partition", module if os.path.exists(module) else fwd])
    algorithms = run("schedule", [overlap, "schedule", "--list-algorithms"]).split("\n")
    for a in [line.split()[0] for line in algorithms if line.strip()]:
        run(f"schedule {a} (forward)", [overlap, "schedule", fwd, "--algorithm", a])
        run(f"schedule {a} (backward)", [overlap, "schedule", bwd, "--backward", "--algorithm", a])
    out = prefix + ".out.safetensors"
    ex = run("exec", [overlap, "exec", fwd, "--backward-graph", bwd, "--weights", weights,
                      "--save", out])
    times = dict(re.findall(r"^(forward|backward): [0-9]+ nodes in ([0-9.]+ [a-z]+);", ex, re.M))
    notes, exec_rule = [], "within 1e-4"
    try:
        cmp = run("compare with torch", [PY, "-m", "overlap_export.compare", fwd, weights, out])
    except Failed as e:
        # float32 results depend on summation order, and a deep network's ReLU masks flip
        # where a pre-activation is within a rounding of zero (docs/interop.md). The same
        # graph and kernels in float64 tell a kernel that is wrong (it fails there too) from
        # round-off (the float64 run matches torch's float64 run).
        run("exec --double", [overlap, "exec", fwd, "--backward-graph", bwd, "--weights",
                              weights, "--save", out, "--double"])
        wide = run("compare with torch (float64 run)",
                   [PY, "-m", "overlap_export.compare", fwd, weights, out, "--float64",
                    "--tolerance", str(FLOAT64_TOLERANCE)])
        notes.append(f"float32: {str(e).split(': ', 1)[-1]}; in float64 it matches torch's "
                     f"float64 ({worst_of(wide)})")
        cmp = "compare: " + str(e).split("compare: ")[-1]  # the row keeps float32's figures
        exec_rule = "within 1e-4 (float64: note)"
    m = re.search(r"compare: ([0-9]+) of ([0-9]+) tensors within [^ ]+ \(worst ([^:]+)", cmp)
    # Training: SGD and AdamW steps on fresh batches against torch's own runs (parameters,
    # losses).
    trained, train_log = prefix + ".trained.safetensors", prefix + ".train.log"

    def train(data, optimizer, extra, compare_extra=()):
        with open(train_log, "w") as f:
            f.write(run("train", [overlap, "train", "--graph", fwd, "--backward-graph", bwd,
                                  "--weights", data, "--data", data, "--steps",
                                  str(TRAIN_STEPS), "--lr", str(TRAIN_LR), "--save", trained]
                        + OPTIMIZER_FLAGS[optimizer] + extra))
        return run("compare training with torch", [PY, "-m", "overlap_export.compare",
                                                   "--trained", data, trained, "--losses",
                                                   train_log] + list(compare_extra))

    def compare_training(data, optimizer):
        """(tensors within, worst, whether float32 needed float64's word): the steps in
        overlap train against torch's own, in float64 as well where float32 differs."""
        try:
            tc = train(data, optimizer, [])
            in_double = False
        except Failed as e:
            if str(e).startswith("train:"):  # the run itself failed: nothing to compare
                raise
            # As for exec: the same steps in float64 against torch's float64 training tell a
            # wrong kernel from float32 round-off amplified over the steps (one ReLU mask
            # flipped at step 1 moves a layer's update; evaluation-mode batch norm at random
            # initialization grows round-off through a deep network; AdamW's update divides
            # by the root of a gradient's square, so a gradient of rounding size moves its
            # parameter by the learning rate).
            wide = train(data, optimizer, ["--double"],
                         ["--float64", "--tolerance", str(FLOAT64_TOLERANCE)])
            notes.append(f"{optimizer} training in float32: {str(e).split(': ', 1)[-1]}; in "
                         f"float64 it matches torch's float64 training ({worst_of(wide)})")
            tc = "compare: " + str(e).split("compare: ")[-1]
            in_double = True
        t = re.search(r"compare: ([0-9]+) of ([0-9]+) tensors within [^ ]+ \(worst ([^:]+)", tc)
        return f"{t.group(1)} of {t.group(2)}", t.group(3), in_double

    sys.path.insert(0, TOOLS)
    from overlap_export import compare as compare_module
    first_loss = float(compare_module.read(data)["ref/loss/0"])
    drawn = any(k.startswith("random/") for k in compare_module.read(weights))
    if drawn:  # each framework's generator draws its own masks at every step
        notes.append("training not compared: dropout draws its masks from each framework's "
                     "own generator at every step (the step above is compared on torch's masks)")
    elif not abs(first_loss) < 1e6:  # torch's own training diverges: nothing to compare
        notes.append(f"training not compared: torch's own loss is {first_loss:.3g} at the "
                     "first step (evaluation-mode batch norm at random initialization does not "
                     "normalize, and the activations grow through the layers)")
    if drawn or not abs(first_loss) < 1e6:
        nodes = [len(json.load(open(g))["nodes"]) for g in (fwd, bwd)]
        return {"params": params, "torch": torch_version, "nodes": nodes,
                "forward": times.get("forward", "?"),
                "backward": times.get("backward", "?"),
                "tensors": f"{m.group(1)} of {m.group(2)}", "worst": m.group(3),
                "exec_rule": exec_rule, "trained": "not compared", "trained_worst": "",
                "module": os.path.exists(module),
                "notes": "; ".join(notes)}
    sgd, sgd_worst, sgd_double = compare_training(data, "SGD")
    adamw, adamw_worst, adamw_double = compare_training(adamw_data, "AdamW")
    nodes = [len(json.load(open(g))["nodes"]) for g in (fwd, bwd)]
    return {"params": params, "torch": torch_version, "nodes": nodes,
            "forward": times.get("forward", "?"),
            "backward": times.get("backward", "?"), "tensors": f"{m.group(1)} of {m.group(2)}",
            "worst": m.group(3), "exec_rule": exec_rule,
            "trained": f"SGD {sgd}, AdamW {adamw}",
            "trained_worst": f"{sgd_worst} / {adamw_worst}",
            "trained_rule": "(float64: note)" if sgd_double or adamw_double else "within 1e-4",
            "module": os.path.exists(module), "notes": "; ".join(notes)}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="run only these (no file is written)")
    ap.add_argument("--quick", action="store_true", help="the test's subset; no file written")
    ap.add_argument("--ops", action="store_true",
                    help="the operator-class models only (op_modules.py); no file written")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "gallery.md"))
    ap.add_argument("--save-rows", metavar="FILE",
                    help="with model names: also write their results to FILE (JSON), for "
                         "--apply-rows")
    ap.add_argument("--apply-rows", metavar="FILE",
                    help="replace the rows of FILE's models in --out's table, running nothing")
    ap.add_argument("--capture", choices=("aot", "export"), default="aot",
                    help="the exporter's capture of the pair: aot (AOTAutograd on the model, "
                         "as torch.compile), or export (torch.export's program, then "
                         "AOTAutograd); with model names or --quick only")
    ap.add_argument("--update", action="store_true",
                    help="with model names: rerun them and replace their rows (and notes) in "
                         "the table of --out")
    a = ap.parse_args()
    if a.capture != "aot" and not (a.models or a.quick or a.ops):
        ap.error("--capture export runs named models, --quick or --ops (the table is aot's)")
    if a.apply_rows:
        with open(a.apply_rows) as f:
            update_table(a.out, [tuple(row) for row in json.load(f)])
        return 0
    overlap = os.environ.get("OVERLAP")
    if not overlap:
        subprocess.run(["bazel", "build", "//tools:overlap"], cwd=ROOT, check=True,
                       capture_output=True)
        overlap = os.path.join(ROOT, "bazel-bin", "tools", "overlap")
    everything = LAYERS + OPS + (torchvision_models() + TRANSFORMERS + TIMM
                                 if not a.ops else [])
    chosen = [m for m in everything
              if (not a.models or m[0] in a.models) and (not a.quick or m[0] in QUICK)
              and (not a.ops or m in OPS)]
    missing = set(a.models) - {m[0] for m in everything}
    if missing:
        ap.error("unknown model(s): " + ", ".join(sorted(missing)))
    rows, failed = [], 0
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="overlap_zoo.") as work:
        for name, ctor, kwargs, shape, what in chosen:
            t = time.time()
            if name in SKIPPED:
                rows.append((name, shape, what, None, "not run: " + SKIPPED[name]))
                print(f"zoo: {name}: not run ({SKIPPED[name][:60]}...)", flush=True)
                continue
            try:
                r = one(overlap, name, ctor, kwargs, shape, work, a.capture)
                rows.append((name, shape, what, r, None))
                print(f"zoo: {name}: {r['tensors']} within 1e-4 (worst {r['worst']}); trained "
                      f"{r['trained']} (worst {r['trained_worst']}); exec {r['forward']} / "
                      f"{r['backward']} [{time.time() - t:.0f} s]"
                      + (f" NOTE {r['notes']}" if r["notes"] else ""), flush=True)
            except (Failed, subprocess.TimeoutExpired) as e:
                failed += 1
                rows.append((name, shape, what, None, f"fails at {e}"))
                print(f"zoo: {name}: FAILED at {e} [{time.time() - t:.0f} s]", flush=True)
            for f in os.listdir(work):  # a model's files go before the next one's
                os.unlink(os.path.join(work, f))
    print(f"zoo: {len(chosen) - failed} of {len(chosen)} models pass every step "
          f"({time.time() - start:.0f} s)", flush=True)
    if not a.models and not a.quick and not a.ops:
        write_table(a.out, rows, time.time() - start)
    elif a.update and a.models:
        update_table(a.out, rows)
    if a.save_rows:
        with open(a.save_rows, "w") as f:
            json.dump(rows, f)
    return 1 if failed else 0


BEGIN, END = "<!-- zoo:begin -->", "<!-- zoo:end -->"


def table_lines(rows):
    """The table's rows and the notes for `rows`."""
    lines, notes = [], []
    for name, shape, what, r, note in rows:
        if r is None:
            lines.append(f"| {name} | {shape} | {what} | | | | | {note} | | | |")
            continue
        rule = r.get("trained_rule", "within 1e-4")
        lines.append(f"| {name} | {shape} | {what} | {r.get('torch', '?')} | {r['params']} | "
                     f"{r['nodes'][0]} / "
                     f"{r['nodes'][1]} | {r['forward']} / {r['backward']} | {r['tensors']} "
                     f"{r.get('exec_rule', 'within 1e-4')} | {r['worst']} | {r['trained']}"
                     f"{' ' + rule if r['trained_worst'] else ''} | {r['trained_worst']} |")
        if r["notes"]:
            notes.append(f"- **{name}**: {r['notes']}.")
    return lines, notes


def update_table(path, rows):
    """Replaces the rows (and notes) of the models in `rows` in the zoo table of `path`."""
    text = open(path).read()
    if BEGIN not in text:
        sys.exit(f"zoo: {path} has no zoo table to update")
    head, rest = text.split(BEGIN, 1)
    block, tail = rest.split(END, 1)
    lines = block.split("\n")
    new_rows, new_notes = table_lines(rows)
    names = [row[0] for row in rows]
    for name, line in zip(names, new_rows):
        at = [i for i, ln in enumerate(lines) if ln.startswith(f"| {name} |")]
        if at:
            lines[at[0]] = line
        else:  # a model new to the table: after its last row
            last = max(i for i, ln in enumerate(lines) if ln.startswith("| "))
            lines.insert(last + 1, line)
    lines = [ln for ln in lines if not any(ln.startswith(f"- **{n}**:") for n in names)]
    if new_notes:
        if not any(ln.startswith("Round-off notes") for ln in lines):
            lines += ["", "Round-off notes (a model listed here matches torch as the note says; "
                      "docs/interop.md, \"The comparison rule\", explains the mask flips):", ""]
        while lines and not lines[-1].strip():
            lines.pop()
        lines += new_notes + [""]
    with open(path, "w") as f:
        f.write(head + BEGIN + "\n".join(lines) + END + tail)
    print(f"zoo: updated {len(rows)} row(s) of {path}", flush=True)


def write_table(path, rows, seconds):
    """Replaces the text between the zoo markers of `path` (appended when it has none)."""
    import timm
    import torch
    import torchvision
    import transformers
    lines = [
        BEGIN,
        "## Model zoo",
        "",
        f"*Generated by `tools/zoo.py` on {datetime.date.today().isoformat()} (torch "
        f"{torch.__version__}, torchvision {torchvision.__version__}, {os.cpu_count()} cores, "
        f"{seconds / 60:.0f} minutes). Do not edit by hand: rerun the script.*",
        "",
        f"Every classification constructor of torchvision {torchvision.__version__}'s "
        "`torchvision.models` (10 classes, random weights), small models of torch.nn's common "
        "layers (`tools/overlap_export/testing/zoo_modules.py`), one model per operator class "
        "users' models reach (`op_modules.py` beside it, the `op_` rows; `tools/zoo.py --ops`), "
        f"transformers {transformers.__version__} families at small random configurations "
        "built in code (`hf_models.py` beside it, the `hf_` rows; nothing downloaded) and timm "
        f"{timm.__version__} families at their smallest variants (the `timm_` rows), "
        "each through every step, with the torch that exported it (the **torch** column): "
        "export "
        "(the AOT pair, weights and torch's float32 / float64 reference), `annotate`, "
        "`inspect --shapes`, `partition`, `schedule` by each of the four schedulers forward "
        "and backward, `exec` of the pair on torch's weights, and `compare` of the loss and "
        "every parameter gradient with torch's (docs/interop.md's rule: within 1e-4 of the "
        "largest gradient), then three SGD steps and three AdamW steps (lr 1e-3; AdamW's "
        "weight decay 0.01) in `overlap train` on fresh batches "
        "against torch's own training (every parameter and each step's loss within 1e-4). "
        "Where float32 differs by more (a ReLU mask flipped by one rounding: docs/interop.md, "
        "\"The comparison rule\"), the same run in float64 (`exec --double`, `train --double`) "
        "must match torch's float64 run within 1e-6 (or within ten times torch's own "
        "float64 spread: docs/interop.md, \"Float64's own spread\"), and the model's note "
        "says so; its row "
        "keeps the float32 figures, marked \"(float64: note)\". "
        "**worst** is the largest difference over the model's tensors in that unit; the "
        "executor's times are one run of the forward and the backward on this machine's CPU "
        "kernels (noisy; docs/benchmarks.md has measured comparisons).",
        "",
        "| model | input | what | torch | parameters | nodes (fwd / bwd) | exec fwd / bwd | "
        "vs torch | worst | training vs torch | worst |",
        "|---|---|---|---|---:|---:|---:|---|---:|---|---:|",
    ]
    body, notes = table_lines(rows)
    lines += body
    if notes:
        lines += ["", "Round-off notes (a model listed here matches torch as the note says; "
                  "docs/interop.md, \"The comparison rule\", explains the mask flips):", ""]
        lines += notes
    lines.append(END)
    doc_block.replace_block(path, BEGIN, END, "\n".join(lines))
    print(f"zoo: wrote {path}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
