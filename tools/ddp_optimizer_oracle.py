#!/usr/bin/env python3
"""torch 2.x's own DDPOptimizer as the oracle of `overlap partition --mode reference-2x`.

    tools/ddp_optimizer_oracle.py              every model below; exit 1 on a difference
    tools/ddp_optimizer_oracle.py resnet18     the named models only
    tools/ddp_optimizer_oracle.py --quick      the test's subset (//tools:ddp_optimizer_test)
    tools/ddp_optimizer_oracle.py --backend    overlap's torch.compile backend instead
                                               (overlap.torch.ddp, mode "reference")

Per model: torch.compile (backend "eager") of the model wrapped in DistributedDataParallel
on a one-rank gloo group, as torch.compile runs DDPOptimizer for a DDP user
(torch/_dynamo/backends/distributed.py, reached through torch._dynamo's DDP hook); the
parameters of each bucket it makes, in order, are read from the DDPOptimizer instance
(its `buckets`, kept "for testing/debugging"). Beside it, the graph torch.compile hands a
backend, exported (overlap_export --dynamo: every parameter a graph input, as dynamo lifts
them), and `overlap partition --mode reference-2x` with the same two caps. The two must list
the same parameters in the same buckets in the same order. Caps: about a fifth of the
model's parameter bytes, the first bucket's a tenth (c10d's _DEFAULT_FIRST_BUCKET_BYTES,
which dynamo passes, set for the run), so each model gets several buckets.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

from overlap_python import use_overlap_python  # beside this script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(ROOT, "tools")
PY = use_overlap_python(__file__)  # torch runs in this process, under overlap's Python
TEN = '{"num_classes": 10}'
LAYERS = "overlap_export.testing.zoo_modules"
HF = "overlap_export.testing.hf_models"  # transformers families (tools/zoo.py's hf_ rows)

# (name, constructor, kwargs, input): torchvision classifiers of every family, torch.nn's
# transformer layers (zoo_modules.py; its recurrent models are left out: dynamo breaks the
# graph at nn.LSTM / GRU / RNN) and transformers families (GPT-2 ties its embedding to its
# head).
MODELS = [
    ("resnet18", "torchvision.models:resnet18", TEN, "2x3x64x64"),
    ("resnet50", "torchvision.models:resnet50", TEN, "2x3x64x64"),
    ("resnext50_32x4d", "torchvision.models:resnext50_32x4d", TEN, "2x3x64x64"),
    ("wide_resnet50_2", "torchvision.models:wide_resnet50_2", TEN, "2x3x64x64"),
    ("alexnet", "torchvision.models:alexnet", TEN, "2x3x64x64"),
    ("vgg11", "torchvision.models:vgg11", TEN, "2x3x64x64"),
    ("vgg16_bn", "torchvision.models:vgg16_bn", TEN, "2x3x64x64"),
    ("squeezenet1_1", "torchvision.models:squeezenet1_1", TEN, "2x3x64x64"),
    ("densenet121", "torchvision.models:densenet121", TEN, "2x3x64x64"),
    ("mobilenet_v2", "torchvision.models:mobilenet_v2", TEN, "2x3x64x64"),
    ("mobilenet_v3_small", "torchvision.models:mobilenet_v3_small", TEN, "2x3x64x64"),
    ("mobilenet_v3_large", "torchvision.models:mobilenet_v3_large", TEN, "2x3x64x64"),
    ("shufflenet_v2_x1_0", "torchvision.models:shufflenet_v2_x1_0", TEN, "2x3x64x64"),
    ("mnasnet1_0", "torchvision.models:mnasnet1_0", TEN, "2x3x64x64"),
    ("efficientnet_b0", "torchvision.models:efficientnet_b0", TEN, "2x3x64x64"),
    ("efficientnet_v2_s", "torchvision.models:efficientnet_v2_s", TEN, "2x3x64x64"),
    ("regnet_y_400mf", "torchvision.models:regnet_y_400mf", TEN, "2x3x64x64"),
    ("regnet_x_800mf", "torchvision.models:regnet_x_800mf", TEN, "2x3x64x64"),
    ("googlenet", "torchvision.models:googlenet", TEN, "2x3x64x64"),
    ("convnext_tiny", "torchvision.models:convnext_tiny", TEN, "2x3x64x64"),
    ("swin_t", "torchvision.models:swin_t", TEN, "2x3x64x64"),
    ("vit_b_32", "torchvision.models:vit_b_32",
     '{"num_classes": 10, "image_size": 64}', "2x3x64x64"),
    ("transformer_encoder", f"{LAYERS}:transformer", "{}", "2x6:int64:11"),
    ("transformer_decoder", f"{LAYERS}:transformer",
     '{"decoder": true, "norm_first": true, "activation": "gelu"}', "2x6:int64:11"),
] + [(f"hf_{n}", f"{HF}:{n}", "{}", shape) for n, shape in [
    ("gpt2", "2x8:int64:64"), ("llama", "2x8:int64:64"), ("bert", "2x8:int64:64"),
    ("t5", "2x8:int64:64"), ("vit", "2x3x32x32"), ("clip_text", "2x8:int64:64")]]
QUICK = ["resnet18", "mobilenet_v3_small", "transformer_encoder", "hf_gpt2", "hf_t5"]
# --backend --quick (//python:torch_ddp_test): no export, so more models in the same time.
QUICK_BACKEND = QUICK + ["alexnet", "vgg11", "squeezenet1_1", "mobilenet_v2",
                         "shufflenet_v2_x1_0", "efficientnet_b0", "regnet_y_400mf",
                         "transformer_decoder", "hf_llama", "hf_bert"]


def dynamo_names(model):
    """The model's parameter name (a tied weight's first) by dynamo's name for its graph
    input: its source, L['self']._modules['a']._modules['0']._parameters['w'] ->
    L_self_modules_a_modules_0_parameters_w_."""
    names, first_name = {}, {}
    for n, p in model.named_parameters(remove_duplicate=False):
        first_name.setdefault(id(p), n)
        *path, local = n.split(".")
        source = "L_self_" + "".join(f"modules_{m}_" for m in path) + f"parameters_{local}_"
        # Characters a Python name cannot hold become _ (regnet's "block2-1").
        names[re.sub(r"[^0-9A-Za-z_]", "_", source)] = first_name[id(p)]
    return names


def torch_buckets(ctor, kwargs, shape):
    """DDPOptimizer's buckets for the model, each a list of parameter names (the model's own
    names; a tied weight by its first name), and the caps it used."""
    import torch
    from torch._dynamo.backends import distributed as ddp_backend
    from overlap_export import export

    model = export.load_model(ctor, json.loads(kwargs))
    x = export.parse_input(shape, 0)
    names = dynamo_names(model)
    total = sum(p.untyped_storage().nbytes() for p in model.parameters())
    cap = max(4096, total // 5)
    first = max(1024, min(cap, total // 10))
    seen = []
    original = ddp_backend.DDPOptimizer.compile_fn

    def recording(self, gm, example_inputs, **configs):
        result = original(self, gm, example_inputs, **configs)
        seen.append([[names.get(n, n) for n in b.params] for b in self.buckets])
        return result

    torch._dynamo.reset()
    torch._dynamo.config.optimize_ddp = True
    model.train()
    saved_first = torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
    torch.distributed._DEFAULT_FIRST_BUCKET_BYTES = first
    ddp_backend.DDPOptimizer.compile_fn = recording
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=cap / 2**20)
        cap = ddp.bucket_bytes_cap  # DDP's own rounding of the megabytes
        torch.compile(ddp, backend="eager")(x)
    finally:
        ddp_backend.DDPOptimizer.compile_fn = original
        torch.distributed._DEFAULT_FIRST_BUCKET_BYTES = saved_first
    return seen, cap, first


def backend_buckets(ctor, kwargs, shape, cap, first, mode="reference"):
    """The pieces overlap's torch.compile backend (python/overlap/torch.py, DDPOptimizer's
    place) splits the same DDP-wrapped model into, each a list of parameter names, with the
    same caps; pieces compiled by the "eager" backend, as DDPOptimizer's are above."""
    import torch
    import overlap.torch as overlap_torch
    from overlap_export import export

    model = export.load_model(ctor, json.loads(kwargs))
    x = export.parse_input(shape, 0)
    names = dynamo_names(model)
    torch._dynamo.reset()
    model.train()
    backend = overlap_torch.ddp(mode, backend="eager", bucket_cap_bytes=cap,
                                first_bucket_cap_bytes=first)
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=cap / 2**20)
        torch.compile(ddp, backend=backend)(x)
    finally:
        torch._dynamo.config.optimize_ddp = True
    return [[[names.get(n, n) for n in piece] for piece in split] for split in backend.splits]


def overlap_buckets(overlap, ctor, kwargs, shape, cap, first, work):
    """`overlap partition --mode reference-2x`'s buckets on the exported dynamo graph, each a
    list of parameter names (a lifted parameter is named by the model's name for it, a tied
    one by its first: docs/ddp-optimizer.md, X1)."""
    prefix = os.path.join(work, "model")
    env = dict(os.environ, PYTHONPATH=TOOLS)
    subprocess.run([PY, "-m", "overlap_export", ctor, "--kwargs", kwargs, "--input", shape,
                    "-o", prefix, "--dynamo", "--train"], check=True, capture_output=True,
                   text=True, env=env)
    out = prefix + ".partition.json"
    subprocess.run([overlap, "partition", prefix + ".dynamo.json", "--mode", "reference-2x",
                    "--bucket-cap", str(cap), "--first-bucket-cap", str(first), "--json", out],
                   check=True, capture_output=True, text=True)
    return [b["params"] for b in json.load(open(out))["buckets"]]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--backend", action="store_true",
                    help="compare overlap's torch.compile backend (overlap.torch.ddp, mode "
                    "reference) with DDPOptimizer instead of `overlap partition`: no export")
    a = ap.parse_args()
    sys.path.insert(0, TOOLS)
    sys.path.insert(0, os.path.join(ROOT, "python"))  # overlap's package, for --backend
    overlap = os.environ.get("OVERLAP") or os.path.join(ROOT, "bazel-bin", "tools", "overlap")
    import torch
    import torch.distributed as dist
    chosen = [m for m in MODELS if (not a.models or m[0] in a.models)
              and (not a.quick or m[0] in (QUICK_BACKEND if a.backend else QUICK))]
    unknown = set(a.models) - {m[0] for m in MODELS}
    if unknown:
        ap.error("unknown model(s): " + ", ".join(sorted(unknown)))
    differ = 0
    with tempfile.TemporaryDirectory(prefix="overlap_ddp.") as work:
        dist.init_process_group("gloo", store=dist.FileStore(os.path.join(work, "store"), 1),
                                rank=0, world_size=1)
        for name, ctor, kwargs, shape in chosen:
            try:
                graphs, cap, first = torch_buckets(ctor, kwargs, shape)
                if a.backend:
                    splits = backend_buckets(ctor, kwargs, shape, cap, first)
                    ours = splits[0] if len(splits) == 1 else splits
                else:
                    ours = overlap_buckets(overlap, ctor, kwargs, shape, cap, first, work)
            except subprocess.CalledProcessError as e:
                differ += 1
                why = (e.stderr or "").strip().splitlines()
                print(f"ddp_optimizer: {name}: FAILED: {why[-1] if why else e}", flush=True)
                continue
            if len(graphs) != 1:
                differ += 1
                print(f"ddp_optimizer: {name}: DIFFERS: dynamo made {len(graphs)} graphs "
                      "(graph breaks); one graph was exported", flush=True)
                continue
            theirs = graphs[0]
            if theirs == ours:
                print(f"ddp_optimizer: {name}: {len(ours)} buckets, "
                      f"{sum(len(b) for b in ours)} parameters: equal (cap {cap}, first {first})",
                      flush=True)
                continue
            differ += 1
            print(f"ddp_optimizer: {name}: DIFFERS (cap {cap}, first {first}): torch "
                  f"{[len(b) for b in theirs]}, overlap {[len(b) for b in ours]}", flush=True)
            for i, (t, o) in enumerate(zip(theirs, ours)):
                if t != o:
                    print(f"  bucket {i}: torch {t}\n  overlap {o}", flush=True)
                    break
        dist.destroy_process_group()
    print(f"ddp_optimizer: {len(chosen) - differ} of {len(chosen)} models equal", flush=True)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
