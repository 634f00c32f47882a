"""ZeRO-3 step times and peaks on 2 ranks over gloo: FSDP2 (torch's fully_shard) against
overlap.torch.zero3 (overlap's plan run on torch's kernels), by ours and by fast_free.

    python/zero3_bench.py                 the table's models; rewrites docs/benchmarks.md's block
    python/zero3_bench.py gpt --rounds 3  the named models only (no file written)

Per model, two processes (one thread each, this machine's 2 cores) build every variant
from the same weights, warm each up, then take turns: each round runs --iterations SGD
steps of every variant in turn (A B C A B C: every variant sees the same drift of a shared
machine) and keeps each one's median step; the table gives the median over rounds. The
peaks are one step's, by the counting allocator (overlap.torch.LiveBytes: every storage
ATen returns, until freed; `transient_peak`, without what outlives the step) and, for
overlap's, the plan's simulated peak and the values the step held (`peak_bytes`). Every
rank runs with glibc's allocator keeping what it frees (python/bench_util.py, KEEP_MEMORY:
with its defaults, page faults of memory given back and taken again move steps by more than
the variants differ); --glibc-defaults measures without (and overlap.torch.zero3 is built
with keep_memory=False, so that every variant runs on the same allocator either way).
"""

import copy
import datetime
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

GPT = '{"vocab": 8192, "dim": 384, "heads": 6, "layers": 6, "max_seq": 128}'
MODELS = {  # name: (constructor, kwargs, input): tools/bench.py's GPT and a transformers one
    "gpt": ("overlap_export.testing.small_gpt:small_gpt", GPT, "4x128:int64:8192"),
    "hf_llama": ("overlap_export.testing.hf_models:llama", "{}", "8x64:int64:64"),
}
# "under FSDP2's peak": ours planned with FSDP2's measured transient peak as its budget.
VARIANTS = ["FSDP2", "overlap zero3 (lookahead)", "overlap zero3 (fast_free)",
            "overlap zero3 (lookahead, under FSDP2's peak)"]
BEGIN, END = "<!-- zero3-torch-bench:begin -->", "<!-- zero3-torch-bench:end -->"
WARMUP = 2


def build(name, rank):
    from bench_util import model_without_dropout
    from overlap_export import export
    ctor, kwargs, shape = MODELS[name]
    torch.manual_seed(0)
    model = model_without_dropout(ctor, kwargs)
    x = export.parse_input(shape, rank)
    return model, x, export.loss_target("ce", copy.deepcopy(model), [x], rank)


def variant(kind, base, x, target, budget=None):
    """A step function (forward, backward, SGD) for one variant."""
    import overlap.torch as overlap_torch
    from overlap_export import export
    from torch.distributed.fsdp import fully_shard
    model = copy.deepcopy(base)
    if kind == "FSDP2":
        blocks = [m for m in model.modules()
                  if type(m).__name__.endswith(("Block", "DecoderLayer"))]
        for b in blocks:
            fully_shard(b)
        fully_shard(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def step():
            export._loss_fn("ce", model(x), target).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return step, None
    algorithm = kind.split("(")[1].rstrip(")").split(",")[0]
    z = overlap_torch.zero3(model, [x], target, loss="ce", algorithm=algorithm,
                            budget_bytes=budget if "under" in kind else None,
                            keep_memory=False)  # the ranks' allocator: main()
    opt = torch.optim.SGD(z.parameters(), lr=0.01)

    def step():
        z.step([x], target)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step, z


def worker(rank, world, store, name, rounds, iterations, out):
    import overlap.torch as overlap_torch
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world)
    torch.set_num_threads(1)
    base, x, target = build(name, rank)
    steps, peaks = {}, {}
    budget = None
    for kind in VARIANTS:
        step, z = variant(kind, base, x, target, budget)
        for _ in range(WARMUP):
            step()
        with overlap_torch.LiveBytes() as counted:
            step()
        most = torch.tensor([counted.transient_peak])  # the larger of the ranks' peaks
        dist.all_reduce(most, op=dist.ReduceOp.MAX)
        peaks[kind] = {"counted": int(most.item())}
        if kind == "FSDP2":
            budget = int(most.item())
        if z is not None:
            peaks[kind]["values"] = max(z.peak_bytes.values())
            peaks[kind]["simulated"] = z.plan["figures"]["peak_memory_bytes"]
            peaks[kind]["residents"] = z.plan["figures"]["resident_bytes"]
            peaks[kind]["fits"] = z.plan["fits"]
        steps[kind] = step
    from bench_util import interleaved
    times = interleaved(steps, rounds, iterations)
    result = {kind: {"step": times[kind], **peaks[kind]} for kind in VARIANTS}
    if rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


def measure(name, rounds, iterations, work):
    store = os.path.join(work, f"{name}.store")
    out = os.path.join(work, f"{name}.json")
    mp.spawn(worker, args=(2, store, name, rounds, iterations, out), nprocs=2)
    with open(out) as f:
        return json.load(f)


def kb(n):
    return f"{n / 1024:,.0f} KiB" if n is not None else ""


def write_table(rows, rounds, iterations, minutes):
    from bench_util import allocator_note
    lines = [BEGIN, "",
             f"*Generated by `python/zero3_bench.py` on {datetime.date.today().isoformat()}: "
             f"torch {torch.__version__}, 2 ranks over gloo on this machine's 2 cores, one "
             f"thread each; {rounds} rounds, each the median of {iterations} SGD steps per "
             f"variant, variants interleaved; {minutes:.0f} minutes; {allocator_note()}. "
             f"Counted peak: the "
             f"counting allocator's transient peak of one step, the larger of the two "
             f"ranks'.*", "",
             "| model | variant | step (2 ranks) | step / FSDP2 | counted peak (transient) | "
             "values held | simulated | residents |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in rows:
        for kind in VARIANTS:
            v = r[kind]
            lines.append(f"| {name} | {kind} | {v['step'] * 1e3:.1f} ms | "
                         f"{v['step'] / r['FSDP2']['step']:.2f} | {kb(v['counted'])} | "
                         f"{kb(v.get('values'))} | {kb(v.get('simulated'))}"
                         f"{' (budget not met)' if v.get('fits') is False else ''} | "
                         f"{kb(v.get('residents'))} |")
    lines.append(END)
    from bench_util import write_block
    write_block(BEGIN, END, lines, heading="## ZeRO-3 on torch's kernels against FSDP2\n\n")


def main():
    from bench_util import arguments, keep_memory
    a = arguments(__doc__, MODELS, extra=[
        (("--glibc-defaults",), dict(action="store_true", help="glibc's allocator as it "
                                     "comes (it gives freed memory back to the system)"))])
    if not a.glibc_defaults:
        keep_memory()  # the spawned ranks inherit it (python/bench_util.py)
    start = time.time()
    rows = []
    with tempfile.TemporaryDirectory(prefix="overlap_zero3_bench.") as work:
        for name in a.models or list(MODELS):
            r = measure(name, a.rounds, a.iterations, work)
            rows.append((name, r))
            for kind in VARIANTS:
                print(f"zero3_bench: {name} {kind}: {r[kind]['step'] * 1e3:.1f} ms, counted "
                      f"{kb(r[kind]['counted'])}", flush=True)
    if not a.models:
        write_table(rows, a.rounds, a.iterations, (time.time() - start) / 60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
