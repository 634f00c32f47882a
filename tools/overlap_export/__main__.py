"""python3 -m overlap_export MODULE:CONSTRUCTOR --input SHAPE[:DTYPE[:HIGH]] ... -o PREFIX

Writes PREFIX.json (the module-style torch.fx forward, when torch.fx can trace the model)
and, with --aot, PREFIX.forward.json and PREFIX.backward.json (the AOT pair in ATen ops,
docs/ops.md's convention), with --dynamo, PREFIX.dynamo.json (the graph torch.compile hands
a backend). Exits 1 with one line naming the failed step, the model's
module and the construct or exception, never a traceback (--debug, or OVERLAP_EXPORT_DEBUG=1,
prints it too), having written no file: every output is built in memory first, then all
are written together (each atomically; on a failure none is left). Exits 2 on bad usage
(arguments, input specs, output paths that cannot be written), before the model is loaded.
Run it with overlap's torch 2.x environment (tools/venv.sh installs it and prints its
interpreter; docs/interop.md, "Python environments").
"""

import argparse
import json
import os
import sys
import textwrap
import traceback

from . import files, inputs
from .errors import ExportError, one_line

LOSSES = ("sum", "mse", "ce", "none")

_LOSS_HELP = (
    "the AOT pair's loss, the scalar its backward differentiates (default sum):\n"
    "sum: the sum of all the output's elements (aten.sum.default, a full reduction to a "
    "scalar; each output element's gradient is 1);\n"
    "mse: the mean squared error, averaged over all elements, against a random target of "
    "the output's shape (standard normal, drawn from --seed);\n"
    "ce: cross-entropy against random class indices over the output's last dimension "
    "(drawn from --seed), averaged over the batch (a [batch, seq, vocab] output is "
    "flattened to [batch*seq, vocab]: averaged over every position);\n"
    "none: no loss: the forward returns the model's output, and the backward takes the "
    "output's gradient as an input (a tangent); --train-data needs a loss")


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """The description as written; each argument's help wrapped line by line (its explicit
    line breaks kept), words not broken at hyphens."""

    def _split_lines(self, text, width):
        out = []
        for line in text.splitlines():
            out += textwrap.wrap(line, width, break_on_hyphens=False) or [""]
        return out


def _parser():
    ap = argparse.ArgumentParser(prog="overlap_export", description=__doc__,
                                 formatter_class=_Formatter)
    ap.add_argument("model", help="an importable constructor, e.g. torchvision.models:resnet18")
    ap.add_argument("--kwargs", default="{}",
                    help="the constructor's keyword arguments (a JSON object)")
    ap.add_argument("--input", action="append", required=True,
                    help="an example input: 2x3x32x32 (float32), 2x3x32x32:float64, "
                         "4x16:int64:50 (integers in [0, 50); [0, 2) without a bound); "
                         "one per forward argument (--input=SPEC for a spec starting "
                         "with -)")
    ap.add_argument("--aot", action="store_true", help="also write the AOT forward / backward")
    ap.add_argument("--capture", choices=("aot", "export"), default="aot",
                    help="how the AOT pair is captured: aot (default), AOTAutograd on the "
                         "model, as torch.compile does; export, torch.export's program "
                         "(static shapes), then AOTAutograd on it")
    ap.add_argument("--dynamo", action="store_true",
                    help="also write PREFIX.dynamo.json: the forward as torch.compile hands "
                         "it to a backend (dynamo's graph, parameters as inputs), what "
                         "`overlap partition --mode reference-2x` reads")
    ap.add_argument("--loss", default="sum", choices=LOSSES, help=_LOSS_HELP)
    ap.add_argument("--train", action="store_true",
                    help="export in training mode (default: eval, e.g. batch norm's running "
                         "statistics)")
    ap.add_argument("--weights", metavar="FILE",
                    help="write parameters, buffers, the example inputs and the loss's target "
                         "(safetensors: param/<name>, buffer/<name>, input/<i>, target)")
    ap.add_argument("--reference", action="store_true",
                    help="with --weights: also torch's output, loss and gradients on those "
                         "inputs (ref/output, ref/loss, ref/grad/<name>), in float32 and, on a "
                         "float64 copy of the model, float64 (ref64/loss, ref64/grad/<name>): "
                         "what compare's rule reads")
    ap.add_argument("--train-data", metavar="FILE",
                    help="train a copy of the model in torch and write FILE: the batches "
                         "(batch/<k>/input/<i>, batch/<k>/target), the start (param/<name>, "
                         "buffer/<name>, constant/<name>), torch's losses (ref/loss/<k>), "
                         "trained parameters (ref/param/<name>) and buffers (ref/buffer/<name>): "
                         "what `overlap train --data` is checked against")
    ap.add_argument("--train-steps", type=int, default=5, help="with --train-data (default 5)")
    ap.add_argument("--train-ranks", type=int, default=1,
                    help="with --train-data: train as P data-parallel ranks would (DDP, ZeRO-3): "
                         "each rank's forward on its contiguous share of each batch (batch "
                         "norm's statistics per rank), gradients and losses averaged over ranks, "
                         "rank 0's buffers kept (default 1: one process, the whole batch)")
    ap.add_argument("--optimizer", default="sgd", choices=("sgd", "adamw"),
                    help="with --train-data (default sgd)")
    ap.add_argument("--lr", type=float, default=None,
                    help="with --train-data (default 0.1 for sgd, 1e-3 for adamw)")
    ap.add_argument("--momentum", type=float, default=0.0, help="sgd's (default 0)")
    ap.add_argument("--weight-decay", type=float, default=None,
                    help="sgd's L2 / adamw's decoupled decay (default 0 for sgd, 0.01 for "
                         "adamw, torch's defaults)")
    ap.add_argument("--adamw-data", metavar="FILE",
                    help="with --train-data: also the same training (batches, steps, start) "
                         "with AdamW into FILE (--lr, else 1e-3; torch's betas, eps and "
                         "weight decay 0.01), so that one export checks both optimizers")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-o", "--output", required=True,
                    help="the output files' prefix (PREFIX.json, PREFIX.forward.json, "
                         "PREFIX.backward.json): not a folder")
    ap.add_argument("--debug", action="store_true",
                    help="on a failure, print Python's traceback before the one-line error "
                         "(also with OVERLAP_EXPORT_DEBUG=1 in the environment)")
    return ap


def _check_usage(ap, a):
    """Every usage error, before the model is loaded: returns the constructor's kwargs."""
    try:
        kwargs = json.loads(a.kwargs)
    except json.JSONDecodeError as e:
        ap.error(f"--kwargs is not JSON: {e}")
    if not isinstance(kwargs, dict):
        ap.error(f"--kwargs must be a JSON object of keyword arguments, not "
                 f"{type(kwargs).__name__} ({a.kwargs})")
    for spec in a.input:
        try:
            dtype = inputs.input_spec(spec)[1]
        except ValueError as e:
            ap.error(f"--input '{spec}': {e}")
        # The executor's tensor files have no 8- or 16-bit integers (docs/runtime.md).
        if dtype in ("int8", "int16") and (a.weights or a.train_data):
            ap.error(f"--input '{spec}': {dtype} inputs cannot be written to --weights / "
                     f"--train-data (safetensors as the executor reads it has no {dtype})")
    if a.reference and not a.weights:
        ap.error("--reference needs --weights")
    if a.train_data:
        if a.train_steps < 1:
            ap.error("--train-steps must be >= 1")
        if a.train_ranks < 1:
            ap.error("--train-ranks must be >= 1")
        if a.loss == "none":
            ap.error("--train-data needs a loss (--loss sum, mse or ce)")
    if a.adamw_data and not a.train_data:
        ap.error("--adamw-data needs --train-data (it trains the same batches)")
    problem = files.folder_problem(a.output)
    if problem:
        ap.error(f"-o '{a.output}': {problem}; it is the output files' prefix (-o out/resnet18 "
                 f"writes out/resnet18.json, ...)")
    targets = [("-o", a.output + ".json")]
    if a.aot:
        targets += [("-o", a.output + ".forward.json"), ("-o", a.output + ".backward.json")]
    if a.weights is not None:
        targets.append(("--weights", a.weights))
    if a.train_data is not None:
        targets.append(("--train-data", a.train_data))
    if a.adamw_data is not None:
        targets.append(("--adamw-data", a.adamw_data))
    for i, (flag, path) in enumerate(targets):
        problem = files.output_problem(path)
        if problem:
            ap.error(f"{flag} '{path}': {problem}")
        for other_flag, other in targets[:i]:
            if files.same_destination(path, other):
                ap.error(f"{flag} '{path}' and {other_flag}'s '{other}' are the same file")
    return kwargs


def _unexpected(e, model):
    """An exception that no step turned into an ExportError (a case the exporter does not
    handle), in one line: the exporter's function it came from (file and line), then
    diagnose.describe's sentence (the model's module and source line, when they ran)."""
    here = os.path.dirname(os.path.abspath(__file__))
    ours = [f for f in traceback.extract_tb(e.__traceback__)
            if os.path.dirname(os.path.abspath(f.filename)) == here]
    at = f" in {ours[-1].name} ({os.path.basename(ours[-1].filename)}:{ours[-1].lineno})" \
        if ours else ""
    try:
        from .diagnose import describe
        what = describe(e, model)
    except Exception:  # noqa: BLE001 - the description must not fail in its turn
        what = f"{type(e).__name__}: {e}"
    return f"unexpected error{at}: {what} (--debug shows the traceback)"


def main(argv=None):
    ap = _parser()
    a = ap.parse_args(argv)
    kwargs = _check_usage(ap, a)
    debug = a.debug or os.environ.get("OVERLAP_EXPORT_DEBUG", "") not in ("", "0")
    loaded = []  # the model, once its constructor has returned
    try:
        return _export(a, kwargs, loaded)
    except ExportError as e:
        failed, message = e, str(e)
    except Exception as e:  # noqa: BLE001 - every failure is one line, never a traceback
        failed, message = e, f"{a.model}: {_unexpected(e, loaded[0] if loaded else None)}"
    if debug:
        traceback.print_exception(failed)
    print(f"overlap_export: {one_line(message)}", file=sys.stderr)
    return 1


def _export(a, kwargs, loaded):
    """The export main() runs (its errors are main's to print): 0, or 1 without torch."""
    try:  # after the usage checks: a usage error does not wait for torch
        import torch

        from . import export, safetensors
    except ImportError as e:
        print(f"overlap_export: torch: {sys.executable} cannot import it: {e}",
              file=sys.stderr)
        return 1
    torch.manual_seed(a.seed)
    user = export.user_code
    examples = [export.parse_input(s, a.seed + i) for i, s in enumerate(a.input)]
    model = export.load_model(a.model, kwargs)
    loaded.append(model)
    with user("import", "the model's tensor attributes"):
        lifted = export.plain_tensors_as_buffers(model)
    if lifted:
        print(f"overlap_export: {len(lifted)} tensor attribute(s) that are neither parameters "
              f"nor buffers read as buffers: {', '.join(lifted[:4])}"
              f"{' ...' if len(lifted) > 4 else ''}", file=sys.stderr)
    with user("import", "the model's train()"):
        model.train(a.train)
    name = a.model.split(":")[-1]
    written = []  # each output is staged as soon as it is complete; renamed when all are
    with files.Outputs() as outputs:
        path = _write_outputs(a, model, examples, name, outputs, written)
        outputs.commit()
    storages, elements = export.unique_parameter_storages(model)
    print(f"overlap_export: {name}: {path}; parameters: {elements:,} in {storages} "
          f"storages; wrote " + ", ".join(written))
    return 0


def _write_outputs(a, model, examples, name, outputs, written):
    """Builds the run's files into `outputs` (files.Outputs), one at a time, appending each
    path to `written`; a large model's tensors go to a safetensors.Spill beside the output
    rather than into memory. Returns how the graph was captured (a phrase)."""
    import torch

    from . import export, safetensors

    def stage(path, write):
        outputs.add(path, write)
        written.append(path)

    def stage_doc(path, doc):
        stage(path, lambda f: f.write(files.json_bytes(doc)))

    def stage_tensors(path, step, fill, meta):
        with safetensors.Spill(files.spill_folder(path)) as spill:
            try:
                fill(spill)
            except safetensors.Unwritable as e:
                raise ExportError(step, f"{path}: {e}") from None
            stage(path, lambda f: spill.write_to(f, meta))
        export.release()

    try:
        doc = export.export_module_style(model, examples, name)
        stage_doc(a.output + ".json", doc)
        path = "torch.fx (module style)"
    except ExportError as e:
        if e.step != "trace" or e.fatal or not (a.aot or a.dynamo):
            raise
        other = " and ".join(p for p, on in (("AOT", a.aot), ("dynamo", a.dynamo)) if on)
        print(f"overlap_export: {one_line(e)}; taking the {other} path only", file=sys.stderr)
        path = f"{other} only"
    if a.dynamo:
        doc = export.export_dynamo(model, examples, name)
        stage_doc(a.output + ".dynamo.json", doc)
    target = export.loss_target(a.loss, model, examples, a.seed + 100)
    constants, drawn = {}, {}
    if a.aot:
        traced = model if a.capture == "aot" else export.exported_module(model, examples)
        fw, bw, constants, drawn = export.export_aot(traced, examples, a.loss, target, name)
        del traced
        export.release()  # the trace's fake modules and graphs
        if a.capture == "export":
            for doc in (fw, bw):
                doc["producer"]["capture"] = "torch.export"
        stage_doc(a.output + ".forward.json", fw)
        stage_doc(a.output + ".backward.json", bw)
        if constants and not a.weights:
            print(f"overlap_export: the AOT pair reads {len(constants)} tensor "
                  "constant(s) (constant/<name>): runners need them from --weights",
                  file=sys.stderr)
    if a.weights:
        def fill_weights(spill):
            spill.update(export.weights(model, examples, target))
            spill.update(constants)
            if a.reference:
                export.reference(model, examples, a.loss, target, drawn, out=spill)
        stage_tensors(a.weights, "weights", fill_weights,
                      {"model": a.model, "loss": a.loss, "torch": torch.__version__})
    runs = [(a.train_data, a.optimizer, a.weight_decay)] if a.train_data else []
    if a.adamw_data:
        runs.append((a.adamw_data, "adamw", None))
    for data_path, kind, decay in runs:
        opt = {"kind": kind, "momentum": a.momentum, "betas": (0.9, 0.999),
               "eps": 1e-8,
               "lr": a.lr if a.lr is not None else (0.1 if kind == "sgd" else 1e-3),
               "weight_decay": decay if decay is not None else (0.0 if kind == "sgd" else 0.01)}
        meta = {"model": a.model, "loss": a.loss, "torch": torch.__version__,
                "steps": str(a.train_steps)}
        meta.update({k: str(v) for k, v in opt.items()})

        def fill_train(spill):
            export.train_reference(export.copy_model(model), a.input, a.loss, a.train_steps,
                                   opt, a.seed, a.train_ranks, out=spill)
            spill.update({k: v for k, v in constants.items() if not k.startswith("random/")})
        stage_tensors(data_path, "train", fill_train, meta)
    return path


if __name__ == "__main__":
    sys.exit(main())
