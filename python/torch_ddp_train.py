"""overlap's DDP backends for torch.compile (overlap.torch.ddp: split into pieces, or the
step as one graph with its all-reduces inside) against eager DDP: 2 ranks
over gloo on this machine, the same model, seed and batches, SGD; the losses of every step
and the final parameters and buffers must agree. Exit 1 on a difference.

    python torch_ddp_train.py [--models hf_gpt2,resnet18]
                              [--modes reference,default,default/one-graph/keep]
                              [--backend aot_eager] [--steps 3]

Run by //python:torch_ddp_test (with PYTHONPATH naming python/ and tools/).
"""

import argparse
import copy
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

MODELS = {  # name: (constructor, kwargs, input)
    "hf_gpt2": ("overlap_export.testing.hf_models:gpt2", "{}", "4x8:int64:64"),
    "resnet18": ("torchvision.models:resnet18", '{"num_classes": 10}', "4x3x32x32"),
    # In-place ReLU6 and batch norm: the forward's rewrites (update_buffers_in_place,
    # save_results_of_hardtanh) against eager's buffers and gradients.
    "mobilenet_v2": ("torchvision.models:mobilenet_v2", '{"num_classes": 10}', "4x3x32x32"),
    "transformer_encoder": ("overlap_export.testing.zoo_modules:transformer", "{}",
                            "4x6:int64:11"),
}
# .../keep compares training that differs from eager DDP's by round-off (train()); resnet18's
# batch norm over 4 samples of 1x1 maps in its last stage multiplies such differences by
# about 100 per step (1.5e-8 after one step, 1.5e-6 after two, 2026-12-07), so only the
# models without batch norm run it.
KEEP_MODELS = {"hf_gpt2", "transformer_encoder"}
LR = 0.05
# Small enough that each model splits into several pieces (asserted below).
CAP_FRACTION = 5


def train(model, ddp, batches, steps, keep=False):
    """SGD steps; `keep`: gradients zeroed in place (zero_grad(set_to_none=False)) and
    accumulated over two backward passes per step, so each step's gradients land in
    .grad tensors that earlier steps' reductions made. Eager DDP reduces the sum there
    (it copies .grad into its bucket), overlap each pass's gradients: equal up to
    round-off, which a tenth of the rate keeps from growing through resnet18's steps."""
    from overlap_export import export
    opt = torch.optim.SGD(model.parameters(), lr=LR / 10 if keep else LR)
    losses = []
    for step in range(steps):
        x, target = batches[step % len(batches)]
        opt.zero_grad(set_to_none=not keep)
        for _ in range(2 if keep else 1):
            loss = export._loss_fn("ce", ddp(x), target)
            loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _state(model):
    """The model's parameters and buffers (batch norm's statistics and counters), copied."""
    return [t.detach().clone() for t in model.state_dict().values()]


def worker(rank, world, store, name, modes, backend, steps, out):
    import overlap.torch as overlap_torch
    from bench_util import model_without_dropout
    from overlap_export import export
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world)
    torch.set_num_threads(1)
    ctor, kwargs, shape = MODELS[name]
    torch.manual_seed(0)
    base = model_without_dropout(ctor, kwargs)  # compiled code draws other masks
    batches = []
    for step in range(steps):  # each rank its own batches
        x = export.parse_input(shape, 1000 * rank + step)
        batches.append((x, export.loss_target("ce", base, [x], 1000 * rank + step)))
    total = sum(p.numel() * p.element_size() for p in base.parameters())
    cap = max(4096, total // CAP_FRACTION)
    results = {}
    model = copy.deepcopy(base)
    eager = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=cap / 2**20)
    results["eager"] = (train(model, eager, batches, steps),
                        _state(model))
    if any(m.endswith("/keep") for m in modes):
        model = copy.deepcopy(base)
        eager = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=cap / 2**20)
        results["eager/keep"] = (train(model, eager, batches, steps, keep=True),
                                 _state(model))
    for mode in modes:
        torch._dynamo.reset()
        model = copy.deepcopy(base)
        ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=cap / 2**20)
        bucketing, kind = mode.split("/")[0], mode.split("/")[1:]
        chosen = overlap_torch.ddp(bucketing, backend=backend, split="one-graph" not in kind,
                                   **({"divide": "tangents"} if "tangents" in kind else {}),
                                   **({"bucket_cap_bytes": "auto"} if "auto" in kind else {}))
        compiled = torch.compile(ddp, backend=chosen)
        results[mode] = (train(model, compiled, batches, steps, keep="keep" in kind),
                         _state(model))
        if "auto" in kind:  # the caps each rank's model chose, per graph
            caps = [None] * world
            dist.all_gather_object(caps, [c["cap_bytes"] for c in chosen.cap_choices])
            results[mode + "/caps"] = caps
        # Split: the pieces of each graph; one graph: the all-reduces of each backward.
        results[mode + "/pieces"] = (chosen.collectives if "one-graph" in kind
                                     else [len(s) for s in chosen.splits])
    if rank == 0:
        torch.save(results, out)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="hf_gpt2,resnet18,mobilenet_v2,transformer_encoder")
    ap.add_argument("--modes", default="reference,default,default/one-graph,"
                    "default/one-graph/tangents,default/one-graph/keep,default/one-graph/auto",
                    help="reference / default: the split backend; MODE/one-graph: the step "
                    "as one graph (split=False), all-reduces in its backward; .../tangents: "
                    "with divide=\"tangents\"; .../auto: the cap overlap's model chooses "
                    "(bucket_cap_bytes=\"auto\", link and compute measured: every rank must "
                    "choose the same); .../keep: "
                    "gradients zeroed in place and accumulated over two backward passes "
                    "(eager DDP the same way)")
    ap.add_argument("--backend", default="aot_eager")
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory(prefix="overlap_ddp_train.") as work:
        for name in a.models.split(","):
            modes = [m for m in a.modes.split(",")
                     if name in KEEP_MODELS or not m.endswith("/keep")]
            store, out = os.path.join(work, name + ".store"), os.path.join(work, name + ".pt")
            mp.spawn(worker, args=(2, store, name, modes, a.backend, a.steps, out), nprocs=2)
            r = torch.load(out)
            for mode in modes:
                theirs = r["eager/keep" if mode.endswith("/keep") else "eager"]
                mine = r[mode]
                pieces = r[mode + "/pieces"]
                loss_ok = torch.allclose(torch.tensor(mine[0]), torch.tensor(theirs[0]),
                                         rtol=1e-5, atol=1e-6)
                worst = max((a_ - b_).abs().max().item() for a_, b_ in zip(mine[1], theirs[1]))
                param_ok = all(torch.allclose(a_, b_, rtol=1e-4, atol=1e-6)
                               for a_, b_ in zip(mine[1], theirs[1]))
                split_ok = bool(pieces) and max(pieces) > 1
                caps = r.get(mode + "/caps")
                if caps is not None:
                    # The tiny models fit one bucket at the smallest cap the model weighs
                    # (1 MiB): what must hold is that the ranks agree.
                    split_ok = bool(caps[0]) and all(c == caps[0] for c in caps)
                ok = loss_ok and param_ok and split_ok
                failed += not ok
                what = "all-reduces" if "one-graph" in mode else "pieces"
                print(f"torch_ddp: {name} mode {mode} ({a.backend}, {what} {pieces}): losses "
                      f"{['%.6f' % v for v in mine[0]]} vs eager DDP "
                      f"{['%.6f' % v for v in theirs[0]]}; parameters and buffers differ by "
                      f"at most "
                      f"{worst:.2e}: {'equal' if ok else 'DIFFERENT'}"
                      + (f"; caps chosen by rank {caps}" if caps is not None else "")
                      + ("" if split_ok else " (the ranks chose different caps)"
                         if caps is not None else " (one piece, or one all-reduce: nothing "
                         "to overlap)"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
