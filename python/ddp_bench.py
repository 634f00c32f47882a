"""DDP step times on 2 ranks over gloo: eager DDP, DDPOptimizer (torch.compile's own), and
overlap's torch.compile backends (split into pieces; the step as one graph), side by side.

    python/ddp_bench.py                 the table's models; rewrites docs/benchmarks.md's block
    python/ddp_bench.py gpt --rounds 3  the named models only (no file written)

Per model, two processes (one thread each, this machine's 2 cores) build every variant
from the same weights, compile each (warm-up steps), then take turns: each round runs
--iterations SGD steps of every variant in turn (A B C D A B C D: every variant sees the
same drift of a shared machine) and keeps each one's median step; the table gives the
median over rounds. Compiled variants compile their pieces with `aot_eager` (AOTAutograd,
torch's eager kernels), so the variants differ in where communication happens, not in
their kernels.

How much communication each hides: the same variants on one rank (no communication; the
same per-rank batch) give its compute time; the gradients' all-reduces alone, on 2 ranks
in DDP's 25 MiB buckets, give the communication time; exposed = step - compute, hidden =
1 - exposed / communication (clamped to [0, 1]).
"""

import copy
import datetime
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TEN = '{"num_classes": 10}'
GPT = '{"vocab": 8192, "dim": 384, "heads": 6, "layers": 6, "max_seq": 128}'
MODELS = {  # as tools/bench.py's table
    "resnet18": ("torchvision.models:resnet18", TEN, "8x3x64x64"),
    "mobilenet_v2": ("torchvision.models:mobilenet_v2", TEN, "8x3x64x64"),
    "gpt": ("overlap_export.testing.small_gpt:small_gpt", GPT, "4x128:int64:8192"),
}
VARIANTS = ["eager DDP", "DDPOptimizer", "overlap split", "overlap one graph"]
BEGIN, END = "<!-- ddp-torch-bench:begin -->", "<!-- ddp-torch-bench:end -->"
WARMUP = 2


def build(name, rank):
    from overlap_export import export
    from bench_util import model_without_dropout
    ctor, kwargs, shape = MODELS[name]
    torch.manual_seed(0)
    model = model_without_dropout(ctor, kwargs)
    x = export.parse_input(shape, rank)
    return model, x, export.loss_target("ce", model, [x], rank)


def variant(kind, base):
    """(model, the callable a step runs) for one variant."""
    import overlap.torch as overlap_torch
    model = copy.deepcopy(base)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    if kind == "eager DDP":
        return model, ddp
    if kind == "DDPOptimizer":
        torch._dynamo.config.optimize_ddp = True
        return model, torch.compile(ddp, backend="aot_eager")
    backend = overlap_torch.ddp("default", backend="aot_eager",
                                split=kind == "overlap split")
    return model, torch.compile(ddp, backend=backend)


def step_fn(model, run, x, target):
    from overlap_export import export
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        opt.zero_grad(set_to_none=True)
        export._loss_fn("ce", run(x), target).backward()
        opt.step()
    return step


def allreduce_time(model, iterations):
    """Seconds to all-reduce the model's gradients in DDP's 25 MiB buckets, alone."""
    cap = 25 * 1024 * 1024
    sizes, size = [], 0
    for p in reversed(list(model.parameters())):
        size += p.numel()
        if size * 4 >= cap:
            sizes.append(size)
            size = 0
    sizes += [size] if size else []
    buffers = [torch.ones(n) for n in sizes]
    times = []
    for _ in range(iterations + 1):
        dist.barrier()
        start = time.perf_counter()
        for b in buffers:
            dist.all_reduce(b)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def worker(rank, world, store, name, rounds, iterations, out):
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                            world_size=world)
    torch.set_num_threads(1)
    base, x, target = build(name, rank)
    steps = {}
    torch._dynamo.reset()
    for kind in VARIANTS:
        # No reset between variants: it would drop the earlier ones' compiled code. Each
        # compiles during its warm-up, under the optimize_ddp setting variant() chose.
        model, run = variant(kind, base)
        steps[kind] = step_fn(model, run, x, target)
        for _ in range(WARMUP):  # compiles
            steps[kind]()
        if rank == 0:
            print(f"ddp_bench: {name} on {world} rank(s): {kind} compiled", flush=True)
    from bench_util import interleaved
    result = interleaved(steps, rounds, iterations)
    if world > 1:
        result["allreduce"] = allreduce_time(base, iterations)
    if rank == 0:
        torch.save(result, out)
    dist.destroy_process_group()


def measure(name, world, rounds, iterations, work):
    store = os.path.join(work, f"{name}.{world}.store")
    out = os.path.join(work, f"{name}.{world}.pt")
    mp.spawn(worker, args=(world, store, name, rounds, iterations, out), nprocs=world)
    return torch.load(out)


def write_table(rows, rounds, iterations, minutes):
    lines = [BEGIN, "",
             f"*Generated by `python/ddp_bench.py` on {datetime.date.today().isoformat()}: "
             f"torch {torch.__version__}, 2 ranks over gloo on this machine's 2 cores, one "
             f"thread each; {rounds} rounds, each the median of {iterations} SGD steps per "
             f"variant, variants interleaved; {minutes:.0f} minutes.*", "",
             "| model | variant | step (2 ranks) | compute (1 rank) | all-reduces alone | "
             "exposed | hidden | step / eager DDP |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, two, one in rows:
        comm = two["allreduce"]
        for kind in VARIANTS:
            exposed = max(0.0, two[kind] - one[kind])
            hidden = min(1.0, max(0.0, 1 - exposed / comm)) if comm > 0 else 0.0
            lines.append(f"| {name} | {kind} | {two[kind] * 1e3:.1f} ms | "
                         f"{one[kind] * 1e3:.1f} ms | {comm * 1e3:.1f} ms | "
                         f"{exposed * 1e3:.1f} ms | {hidden:.0%} | "
                         f"{two[kind] / two['eager DDP']:.2f} |")
    lines.append(END)
    from bench_util import write_block
    write_block(BEGIN, END, lines, heading="## DDP inside torch.compile: step times\n\n")


def main():
    from bench_util import arguments
    a = arguments(__doc__, MODELS)
    start = time.time()
    rows = []
    with tempfile.TemporaryDirectory(prefix="overlap_ddp_bench.") as work:
        for name in a.models or list(MODELS):
            two = measure(name, 2, a.rounds, a.iterations, work)
            one = measure(name, 1, a.rounds, a.iterations, work)
            rows.append((name, two, one))
            for kind in VARIANTS:
                print(f"ddp_bench: {name} {kind}: {two[kind] * 1e3:.1f} ms on 2 ranks, "
                      f"{one[kind] * 1e3:.1f} ms on 1; all-reduces alone "
                      f"{two['allreduce'] * 1e3:.1f} ms", flush=True)
    if not a.models:
        write_table(rows, a.rounds, a.iterations, (time.time() - start) / 60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
