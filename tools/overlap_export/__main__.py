"""python3 -m overlap_export MODULE:CONSTRUCTOR --input SHAPE[:DTYPE[:HIGH]] ... -o PREFIX

Writes PREFIX.json (the module-style torch.fx forward, when torch.fx can trace the model)
and, with --aot, PREFIX.forward.json and PREFIX.backward.json (the AOT pair in ATen ops,
docs/ops.md's convention). Exits 1 naming the failed step and PyTorch's exception, having
written no partial file; 2 on bad usage. Run it with Debian's interpreter
(/usr/bin/python3), the one python3-torch is installed for.
"""

import argparse
import json
import sys

import torch

from . import export, safetensors
from .graph_json import ExportError


def main(argv=None):
    ap = argparse.ArgumentParser(prog="overlap_export", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="an importable constructor, e.g. torchvision.models:resnet18")
    ap.add_argument("--kwargs", default="{}", help="the constructor's keyword arguments (JSON)")
    ap.add_argument("--input", action="append", required=True,
                    help="an example input: 2x3x32x32, 2x3x32x32:float64, 4x16:int64:50")
    ap.add_argument("--aot", action="store_true", help="also write the AOT forward / backward")
    ap.add_argument("--loss", default="sum", help="the AOT pair's loss: sum, mse, ce, none")
    ap.add_argument("--train", action="store_true",
                    help="export in training mode (default: eval, e.g. batch norm's running "
                         "statistics)")
    ap.add_argument("--weights", metavar="FILE",
                    help="write parameters, buffers, the example inputs and the loss's target "
                         "(safetensors: param/<name>, buffer/<name>, input/<i>, target)")
    ap.add_argument("--reference", action="store_true",
                    help="with --weights: also torch's output, loss and gradients on those "
                         "inputs (ref/output, ref/loss, ref/grad/<name>)")
    ap.add_argument("--train-data", metavar="FILE",
                    help="train a copy of the model in torch and write FILE: the batches "
                         "(batch/<k>/input/<i>, batch/<k>/target), the start (param/<name>), "
                         "torch's losses (ref/loss/<k>) and trained parameters "
                         "(ref/param/<name>): what `overlap train --data` is checked against")
    ap.add_argument("--train-steps", type=int, default=5, help="with --train-data (default 5)")
    ap.add_argument("--optimizer", default="sgd", choices=("sgd", "adamw"),
                    help="with --train-data (default sgd)")
    ap.add_argument("--lr", type=float, default=None,
                    help="with --train-data (default 0.1 for sgd, 1e-3 for adamw)")
    ap.add_argument("--momentum", type=float, default=0.0, help="sgd's (default 0)")
    ap.add_argument("--weight-decay", type=float, default=None,
                    help="sgd's L2 / adamw's decoupled decay (default 0 for sgd, 0.01 for "
                         "adamw, torch's defaults)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-o", "--output", required=True, help="the output files' prefix")
    a = ap.parse_args(argv)
    try:
        kwargs = json.loads(a.kwargs)
    except json.JSONDecodeError as e:
        ap.error(f"--kwargs is not JSON: {e}")
    torch.manual_seed(a.seed)
    try:
        model = export.load_model(a.model, kwargs)
        model.train(a.train)
        inputs = [export.parse_input(s, a.seed + i) for i, s in enumerate(a.input)]
        name = a.model.split(":")[-1]
        written = []
        docs = []
        try:
            docs.append((a.output + ".json", export.export_module_style(model, inputs, name)))
            path = "torch.fx (module style)"
        except ExportError as e:
            if e.step != "trace":
                raise
            if not a.aot:
                raise
            print(f"overlap_export: {e}; taking the AOT path only", file=sys.stderr)
            path = "AOT only"
        target = export.loss_target(a.loss, model, inputs, a.seed + 100)
        if a.aot:
            fw, bw = export.export_aot(model, inputs, a.loss, target, name)
            docs.append((a.output + ".forward.json", fw))
            docs.append((a.output + ".backward.json", bw))
        blob = None
        if a.weights:
            tensors = export.weights(model, inputs, target)
            if a.reference:
                tensors.update(export.reference(model, inputs, a.loss, target))
            blob = safetensors.to_bytes(tensors, {"model": a.model, "loss": a.loss,
                                                  "torch": torch.__version__})
        elif a.reference:
            ap.error("--reference needs --weights")
        train_blob = None
        if a.train_data:
            import copy
            opt = {"kind": a.optimizer, "momentum": a.momentum, "betas": (0.9, 0.999),
                   "eps": 1e-8,
                   "lr": a.lr if a.lr is not None else (0.1 if a.optimizer == "sgd" else 1e-3),
                   "weight_decay": a.weight_decay if a.weight_decay is not None
                   else (0.0 if a.optimizer == "sgd" else 0.01)}
            if a.train_steps < 1:
                ap.error("--train-steps must be >= 1")
            tensors = export.train_reference(copy.deepcopy(model), a.input, a.loss,
                                             a.train_steps, opt, a.seed)
            meta = {"model": a.model, "loss": a.loss, "torch": torch.__version__,
                    "steps": str(a.train_steps)}
            meta.update({k: str(v) for k, v in opt.items()})
            train_blob = safetensors.to_bytes(tensors, meta)
        for file, doc in docs:  # all built before any is written
            export.write_json(file, doc)
            written.append(file)
        if blob is not None:
            export.write_bytes(a.weights, blob)
            written.append(a.weights)
        if train_blob is not None:
            export.write_bytes(a.train_data, train_blob)
            written.append(a.train_data)
        storages, elements = export.unique_parameter_storages(model)
        print(f"overlap_export: {name}: {path}; parameters: {elements:,} in {storages} "
              f"storages; wrote " + ", ".join(written))
    except ExportError as e:
        print(f"overlap_export: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
