"""DDP step times on 2 ranks over gloo: eager DDP, DDPOptimizer (torch.compile's own), and
overlap's torch.compile backends (split into pieces; the step as one graph), side by side.

    python/ddp_bench.py                 the table's models; rewrites docs/benchmarks.md's block
    python/ddp_bench.py gpt --rounds 3  the named models only (no file written)
    python/ddp_bench.py --cluster 1gbit the 2 ranks on two hosts of the one-machine cluster
                                        (tools/cluster.sh, as root), links limited to 1 Gbit/s;
                                        its own block of docs/benchmarks.md
    python/ddp_bench.py --caps 4        also eager DDP, DDPOptimizer and the one graph with
                                        4 MiB buckets (DDP's bucket_cap_mb)
    python/ddp_bench.py gpt --backend inductor
                                        the compiled variants through inductor (no file
                                        written: the tables are aot_eager's)

"overlap one graph, auto buckets" is the one graph with the cap overlap's model chooses
(`ddp(split=False, bucket_cap_bytes="auto")`: this machine's compute and the ranks'
all-reduce measured when it compiles); the table names the cap it chose.

Per model, two processes (one thread each, this machine's 2 cores) build every variant
from the same weights, compile each (warm-up steps), then take turns: each round runs
--iterations SGD steps of every variant in turn (A B C D A B C D: every variant sees the
same drift of a shared machine) and keeps each one's median step. --processes pairs of
processes (2 by default) do this one after another, since a pair keeps the heap layout
it started with for all its rounds; the table gives the median over all their rounds, and
for overlap's variants in how many rounds the variant's median step was at most eager
DDP's and DDPOptimizer's of the same round. Compiled variants compile their pieces with
`aot_eager` (AOTAutograd, torch's eager kernels), so the variants differ in where
communication happens, not in their kernels; the one graph's forward also keeps eager's
memory (batch norm's buffers and ReLU6 in place, docs/torch.md), which the stock
`aot_eager` of DDPOptimizer and the split variant does not.

How much communication each hides: the same variants on one rank (no communication; the
same per-rank batch) give its compute time; the gradients' all-reduces alone, on 2 ranks
in DDP's 25 MiB buckets, give the communication time; exposed = step - compute, hidden =
1 - exposed / communication (clamped to [0, 1]).

Memory: every rank runs with glibc's allocator told to keep what it frees (MALLOC_TRIM_THRESHOLD_
1 GiB, MALLOC_MMAP_THRESHOLD_ 32 MiB), as PyTorch's CPU launcher (torch.backends.xeon.run_cpu)
keeps it by preloading tcmalloc or jemalloc. With glibc's defaults a step gives memory back to
the system when the top of its heap frees past the trim threshold, and the next step faults
it in again: up to 13,728 page faults a step on resnet18 (56 MB, 2026-12-07), 15% of its
step, and which variants fault changes from run to run with where each one's memory lies,
so the comparison would measure the heap's layout. --glibc-defaults measures that way.
overlap's backends are built with keep_memory=False, so that every variant runs on the same
allocator either way (by default they keep freed memory themselves: docs/torch.md).

With --cluster RATE the two ranks run on two hosts of tools/cluster.sh (network namespaces
joined by a bridge, each link limited to RATE by tbf both ways; gloo on the hosts' eth0),
so an all-reduce costs wire time rather than memory copies; the one-rank compute runs as
without it.
"""

import argparse
import copy
import datetime
import os
import statistics
import subprocess
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
VARIANTS = ["eager DDP", "DDPOptimizer", "overlap split", "overlap one graph",
            "overlap one graph, auto buckets"]
CAPPED = ["eager DDP", "DDPOptimizer", "overlap one graph"]  # --caps: each with a cap
BEGIN, END = "<!-- ddp-torch-bench:begin -->", "<!-- ddp-torch-bench:end -->"
CLUSTER_BEGIN = "<!-- ddp-torch-cluster:begin -->"
CLUSTER_END = "<!-- ddp-torch-cluster:end -->"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIX = "ovdb"  # the cluster's namespaces: ovdbh0, ovdbh1, ovdbhub
PORT = 29531
WARMUP = 2


def build(name, rank):
    from overlap_export import export
    from bench_util import model_without_dropout
    ctor, kwargs, shape = MODELS[name]
    torch.manual_seed(0)
    model = model_without_dropout(ctor, kwargs)
    x = export.parse_input(shape, rank)
    return model, x, export.loss_target("ce", model, [x], rank)


def variant(kind, base, compiler="aot_eager"):
    """(model, the callable a step runs, overlap's backend or None) for one variant.
    "KIND, N MiB buckets": KIND with DDP's bucket cap set to N MiB (every variant takes its
    buckets from the DDP module's cap: DDP's reducer, DDPOptimizer's splits, overlap's
    partitioner); "KIND, auto buckets": the cap overlap's model chooses."""
    import overlap.torch as overlap_torch
    kind, _, cap = kind.partition(", ")
    auto = cap == "auto buckets"
    model = copy.deepcopy(base)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, bucket_cap_mb=int(cap.split()[0]) if cap and not auto else 25)
    if kind == "eager DDP":
        return model, ddp, None
    if kind == "DDPOptimizer":
        torch._dynamo.config.optimize_ddp = True
        return model, torch.compile(ddp, backend=compiler), None
    backend = overlap_torch.ddp("default", backend=compiler,
                                split=kind == "overlap split",
                                bucket_cap_bytes="auto" if auto else None,
                                keep_memory=False)  # the ranks' allocator: main()
    return model, torch.compile(ddp, backend=backend), backend


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


def worker(rank, world, init, name, rounds, iterations, out, variants, compiler="aot_eager"):
    from bench_util import interleaved, sgd_step
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    torch.set_num_threads(1)
    base, x, target = build(name, rank)
    steps, chosen = {}, {}
    torch._dynamo.reset()
    for kind in variants:
        # No reset between variants: it would drop the earlier ones' compiled code. Each
        # compiles during its warm-up, under the optimize_ddp setting variant() chose.
        model, run, backend = variant(kind, base, compiler)
        steps[kind] = sgd_step(model, run, x, target)
        for _ in range(WARMUP):  # compiles
            steps[kind]()
        if backend is not None and backend.cap_choices:
            chosen[kind] = [c["cap_bytes"] for c in backend.cap_choices]
            if rank == 0:
                for c in backend.cap_choices:
                    print(f"ddp_bench: {name}: {kind} chose {c['cap_bytes'] / 2**20:g} MiB "
                          f"(forward {c['forward_s'] * 1e3:.1f} ms timed node by node; "
                          f"all-reduce {c['latency_s'] * 1e6:.0f} us + bytes / "
                          f"{c['bandwidth_bytes_per_s'] / 1e6:.0f} MB/s; forward "
                          f"{c['compute_slowdown']:+.0%} beside it; predicted "
                          "backward + exposed by cap: " + ", ".join(
                              f"{k['cap_bytes'] / 2**20:g} MiB {k['backward_s'] * 1e3:.1f} + "
                              f"{k['exposed_s'] * 1e3:.1f} ms"
                              for k in c["candidates"]) + ")", flush=True)
        if rank == 0:
            print(f"ddp_bench: {name} on {world} rank(s): {kind} compiled", flush=True)
    per_round = {}
    result = interleaved(steps, rounds, iterations, per_round)
    result["chosen"] = chosen
    result["rounds"] = per_round
    if world > 1:
        result["allreduce"] = allreduce_time(base, iterations)
    if rank == 0:
        torch.save(result, out)
    dist.destroy_process_group()


def measure(name, world, rounds, iterations, work, compiler="aot_eager"):
    # A file store's file is its rendezvous: each process pair gets a new one.
    work = tempfile.mkdtemp(dir=work)
    store = os.path.join(work, f"{name}.{world}.store")
    out = os.path.join(work, f"{name}.{world}.pt")
    mp.spawn(worker, args=(world, f"file://{store}", name, rounds, iterations, out,
                           VARIANTS, compiler), nprocs=world)
    return torch.load(out)


def cluster(*args):
    """tools/cluster.sh ARGS..., failing with its message."""
    done = subprocess.run([os.path.join(ROOT, "tools", "cluster.sh"), *args],
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"ddp_bench: tools/cluster.sh {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def measure_on_cluster(name, rounds, iterations, caps, work, compiler="aot_eager"):
    """The 2-rank measurement with rank i on cluster host i (the cluster is up)."""
    out = os.path.join(work, f"{name}.cluster.pt")
    init = f"tcp://{cluster('addr', '0')}:{PORT}"
    env = dict(os.environ, GLOO_SOCKET_IFNAME="eth0")
    ranks = [subprocess.Popen(
        ["ip", "netns", "exec", f"{PREFIX}h{r}", sys.executable, os.path.abspath(__file__),
         "--as-rank", str(r), "--init", init, "--out", out, "--rounds", str(rounds),
         "--iterations", str(iterations), "--caps", caps, "--backend", compiler, name],
        env=env) for r in range(2)]
    codes = [p.wait() for p in ranks]
    if any(codes):
        sys.exit(f"ddp_bench: {name} on the cluster: ranks exited with {codes}")
    return torch.load(out)


def pooled(results):
    """One measurement from several process pairs' (each a worker's result): each kind's
    median over all their rounds, the rounds in order, the all-reduces' median, the caps
    each chose. A pair of processes keeps the heap layout it started with for all its
    rounds, and that layout moves a GPT step by up to 8% from one pair to the next
    (2026-12-08), so the table pools pairs."""
    first = results[0]
    kinds = [k for k in first["rounds"]]
    out = {"rounds": {k: [t for r in results for t in r["rounds"][k]] for k in kinds}}
    for k in kinds:
        out[k] = statistics.median(out["rounds"][k])
    if "allreduce" in first:
        out["allreduce"] = statistics.median(r["allreduce"] for r in results)
    chosen = {}
    for r in results:
        for k, caps in r.get("chosen", {}).items():
            chosen.setdefault(k, [])
            chosen[k] += [c for c in caps if c not in chosen[k]]
    out["chosen"] = chosen
    return out


def write_table(rows, rounds, iterations, minutes, rate=None, processes=1):
    from bench_util import allocator_note, rounds_at_most
    where = (f"2 ranks over gloo on two hosts of the one-machine cluster (tools/cluster.sh), "
             f"links limited to {rate} by tbf, this machine's 2 cores, one thread each"
             if rate else "2 ranks over gloo on this machine's 2 cores, one thread each")
    begin, end = (CLUSTER_BEGIN, CLUSTER_END) if rate else (BEGIN, END)
    lines = [begin, "",
             f"*Generated by `python/ddp_bench.py{' --cluster ' + rate if rate else ''}` on "
             f"{datetime.date.today().isoformat()}: torch {torch.__version__}, {where}; "
             f"{processes} process pairs of {rounds} rounds each, each round the median of "
             f"{iterations} SGD steps per variant, "
             f"variants interleaved; {minutes:.0f} minutes; {allocator_note()}.*", "",
             "| model | variant | step (2 ranks) | compute (1 rank) | all-reduces alone | "
             "exposed | hidden | step / eager DDP | rounds at most eager DDP | rounds at "
             "most DDPOptimizer |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, two, one in rows:
        comm = two["allreduce"]
        for kind in VARIANTS:
            exposed = max(0.0, two[kind] - one[kind])
            hidden = min(1.0, max(0.0, 1 - exposed / comm)) if comm > 0 else 0.0
            caps = two.get("chosen", {}).get(kind)
            rounds_of = two.get("rounds", {})
            paired = (" | " if kind in ("eager DDP", "DDPOptimizer") else
                      f"{rounds_at_most(rounds_of, kind, 'eager DDP')} | "
                      f"{rounds_at_most(rounds_of, kind, 'DDPOptimizer')}")
            label = kind + (f" ({'/'.join(f'{c / 2**20:g}' for c in caps)} MiB)"
                            if caps else "")
            lines.append(f"| {name} | {label} | {two[kind] * 1e3:.1f} ms | "
                         f"{one[kind] * 1e3:.1f} ms | {comm * 1e3:.1f} ms | "
                         f"{exposed * 1e3:.1f} ms | {hidden:.0%} | "
                         f"{two[kind] / two['eager DDP']:.2f} | {paired} |")
    lines.append(end)
    from bench_util import write_block
    heading = ("## DDP inside torch.compile on the one-machine cluster\n\n" if rate
               else "## DDP inside torch.compile: step times\n\n")
    write_block(begin, end, lines, heading=heading)


def main():
    from bench_util import arguments, keep_memory
    a = arguments(__doc__, MODELS, extra=[
        (("--cluster",), dict(metavar="RATE", help="the 2 ranks on two hosts of the "
                              "one-machine cluster, links limited to RATE (tc units)")),
        (("--as-rank",), dict(type=int, help=argparse.SUPPRESS)),
        (("--init",), dict(help=argparse.SUPPRESS)),
        (("--out",), dict(help=argparse.SUPPRESS)),
        (("--processes",), dict(type=int, default=2, help="process pairs per model "
                                "(each runs --rounds rounds; the table pools them)")),
        (("--caps",), dict(metavar="MIB,...", default="", help="also eager DDP, "
                           "DDPOptimizer and the one graph with these bucket caps (MiB)")),
        (("--glibc-defaults",), dict(action="store_true", help="glibc's allocator as it "
                                     "comes (it gives freed memory back to the system)")),
        (("--backend",), dict(default="aot_eager", help="the compiled variants' inner "
                              "backend (aot_eager: torch's kernels op by op; inductor); "
                              "the file is written only for aot_eager"))])
    for mib in filter(None, a.caps.split(",")):
        VARIANTS.extend(f"{kind}, {int(mib)} MiB buckets" for kind in CAPPED)
    if a.as_rank is not None:  # one rank of --cluster, on its host
        worker(a.as_rank, 2, a.init, a.models[0], a.rounds, a.iterations, a.out, VARIANTS,
               a.backend)
        return 0
    if not a.glibc_defaults:
        keep_memory()  # the ranks (spawned or on the cluster) inherit it
    start = time.time()
    rows = []
    if a.cluster:
        if os.geteuid() != 0:
            sys.exit("ddp_bench: --cluster needs root (network namespaces)")
        cluster("up", "2", "--rate", a.cluster, "--prefix", PREFIX)
    try:
        with tempfile.TemporaryDirectory(prefix="overlap_ddp_bench.") as work:
            for name in a.models or list(MODELS):
                two = pooled([
                    measure_on_cluster(name, a.rounds, a.iterations, a.caps, work, a.backend)
                    if a.cluster else measure(name, 2, a.rounds, a.iterations, work, a.backend)
                    for _ in range(a.processes)])
                one = pooled([measure(name, 1, a.rounds, a.iterations, work, a.backend)
                              for _ in range(a.processes)])
                rows.append((name, two, one))
                for kind in VARIANTS:
                    print(f"ddp_bench: {name} {kind}: {two[kind] * 1e3:.1f} ms on 2 ranks, "
                          f"{one[kind] * 1e3:.1f} ms on 1; all-reduces alone "
                          f"{two['allreduce'] * 1e3:.1f} ms", flush=True)
    finally:
        if a.cluster:
            cluster("down", "--prefix", PREFIX)
    if not a.models and a.backend == "aot_eager":
        write_table(rows, a.rounds, a.iterations, (time.time() - start) / 60, a.cluster,
                    a.processes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
