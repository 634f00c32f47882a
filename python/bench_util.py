"""What the side-by-side scripts share (ddp_bench.py, zero3_bench.py and the 2-rank tests):
the model without dropout, interleaved timing, the command line."""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist


# glibc's allocator keeping what it frees (read at process start: set before ranks spawn).
# With its defaults a step that frees past the trim threshold at the heap's top gives the
# memory back to the system and the next step faults it in again; which variants fault
# changes with where each one's memory lies (docs/benchmarks.md). PyTorch's CPU launcher
# (torch.backends.xeon.run_cpu) keeps memory by preloading tcmalloc or jemalloc.
KEEP_MEMORY = {"MALLOC_TRIM_THRESHOLD_": str(1 << 30), "MALLOC_MMAP_THRESHOLD_": str(32 << 20)}


def keep_memory():
    """Sets KEEP_MEMORY in this process's environment, for the ranks it starts."""
    os.environ.update(KEEP_MEMORY)


def allocator_note():
    """How the ranks' allocator runs, for a table's header."""
    kept = all(os.environ.get(k) == v for k, v in KEEP_MEMORY.items())
    return ("glibc's allocator keeping freed memory (MALLOC_TRIM_THRESHOLD_, "
            "MALLOC_MMAP_THRESHOLD_)" if kept else "glibc's allocator as it comes")


def model_without_dropout(ctor, kwargs):
    """`ctor(**kwargs)` (a JSON string) in training mode, dropout off: compiled code and
    other runners draw masks from other random streams, so every variant must compute
    the same step."""
    from overlap_export import export
    model = export.load_model(ctor, json.loads(kwargs)).train()
    for m in model.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            m.p = 0.0
    return model


def sgd_step(model, run, x, target, lr=0.01):
    """A function that runs one SGD step of `model` on the batch: zero_grad (to None),
    `run(x)` (the model, DDP-wrapped or compiled), cross-entropy against `target`, backward,
    the update."""
    from overlap_export import export
    opt = torch.optim.SGD(model.parameters(), lr=lr)

    def step():
        opt.zero_grad(set_to_none=True)
        export._loss_fn("ce", run(x), target).backward()
        opt.step()
    return step


def interleaved(steps, rounds, iterations, per_round=None):
    """{kind: median over rounds of each round's median step}: every round runs
    `iterations` of each step function in turn (A B C A B C), each after a barrier, so
    every variant sees the same drift of a shared machine. `per_round` (a dict), when
    given, gets each kind's round medians in order, for comparisons paired by round."""
    medians = {kind: [] for kind in steps}
    for _ in range(rounds):
        for kind, step in steps.items():
            times = []
            for _ in range(iterations):
                dist.barrier()
                start = time.perf_counter()
                step()
                times.append(time.perf_counter() - start)
            medians[kind].append(statistics.median(times))
    if per_round is not None:
        per_round.update(medians)
    return {kind: statistics.median(v) for kind, v in medians.items()}


def rounds_at_most(per_round, kind, peer):
    """"k/n": in how many of the n rounds `kind`'s median step was at most `peer`'s (the
    same round's, so the machine's drift is paired out); "" without per-round figures."""
    mine, theirs = per_round.get(kind), per_round.get(peer)
    if not mine or not theirs:
        return ""
    return f"{sum(a <= b for a, b in zip(mine, theirs))}/{len(mine)}"


def arguments(doc, models, extra=()):
    """The scripts' command line: model names (none: the table's, and the file written),
    --rounds, --iterations, and `extra` ((flags, add_argument's keywords) each)."""
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help=f"of {', '.join(models)}")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=5)
    for flags, keywords in extra:
        ap.add_argument(*flags, **keywords)
    a = ap.parse_args()
    unknown = set(a.models) - set(models)
    if unknown:
        ap.error("unknown model(s): " + ", ".join(sorted(unknown)))
    return a


def write_block(begin, end, lines, heading):
    """Replaces docs/benchmarks.md's block between `begin` and `end` with `lines` (which
    carry the markers), under `heading` (tools/doc_block.py)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(root, "tools"))
    import doc_block
    doc_block.replace_block(os.path.join(root, "docs", "benchmarks.md"), begin, end,
                            "\n".join(lines), heading=heading)
