#!/usr/bin/env python3
"""overlap's executor against PyTorch eager and torch.compile, side by side on the same cores.

    tools/bench.py                      every model and work, 1 and 2 threads;
                                                         rewrites docs/benchmarks.md's table
    tools/bench.py resnet18 --threads 1 --rounds 3   no file written

Each model is exported once (tools/overlap_export: the AOT pair, random weights, one batch,
cross-entropy). Then, for every (model, work, threads), fresh processes alternate, overlap
then PyTorch, for --rounds rounds (A B A B: both sides see the same drift of a noisy
machine). A third process per round runs the model under `torch.compile` (its default
backend, CPU inductor: generated C++ / OpenMP kernels; the optimizer stays eager, as
torch.compile(model) leaves it; `--no-inductor` skips it). A process runs the work once to
warm up (oneDNN's code generation, allocator pools, PyTorch's lazy init, inductor's
compilation), then --iterations times, and reports the median of those; the table gives the
median over the rounds and the ratios overlap / PyTorch (< 1: overlap faster). Same weights, same inputs, same thread count (OpenBLAS and oneDNN for overlap,
torch.set_num_threads for PyTorch), evaluation mode (batch norm uses its running
statistics, as the export does).

Works: `fwd+bwd` (forward, loss and backward: `overlap exec --repeat`), `sgd` and `adamw`
(one training step: forward, backward and the optimizer's update, lr 0.01 / 1e-3,
momentum 0, AdamW weight decay 0.01: `overlap train`'s per-step times). Needs torch
(tools/bootstrap.sh --with-torch) and the built CLI (OVERLAP, or bazel build //tools:overlap).
"""

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

import doc_block  # tools/doc_block.py, beside this script
from overlap_python import use_overlap_python  # beside it too

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(ROOT, "tools")
PY = use_overlap_python(__file__)  # the Python with torch (tools/python.sh)
TEN = '{"num_classes": 10}'
GPT = '{"vocab": 8192, "dim": 384, "heads": 6, "layers": 6, "max_seq": 128}'
# name: (constructor, kwargs, input, what)
MODELS = {
    "resnet18": ("torchvision.models:resnet18", TEN, "8x3x64x64", "torchvision, batch 8, 64x64"),
    "mobilenet_v2": ("torchvision.models:mobilenet_v2", TEN, "8x3x64x64",
                     "torchvision, batch 8, 64x64"),
    "gpt": ("overlap_export.testing.small_gpt:small_gpt", GPT, "4x128:int64:8192",
            "13.8M GPT: vocab 8192, dim 384, 6 layers, seq 128, batch 4"),
}
# Beyond the table's three, for wider checks (`bench.py MODEL ...` prints, writes nothing):
# other layer mixes (depthwise + squeeze-excite + SiLU, dense concatenation, channel
# shuffle, plain VGG) and resnet18 at 224 x 224, where the convolutions' images are large.
MORE = {
    "resnet18_224": ("torchvision.models:resnet18", TEN, "2x3x224x224",
                     "torchvision, batch 2, 224x224"),
    "efficientnet_b0": ("torchvision.models:efficientnet_b0", TEN, "8x3x64x64",
                        "torchvision, batch 8, 64x64"),
    "densenet121": ("torchvision.models:densenet121", TEN, "8x3x64x64",
                    "torchvision, batch 8, 64x64"),
    "shufflenet_v2_x1_0": ("torchvision.models:shufflenet_v2_x1_0", TEN, "8x3x64x64",
                           "torchvision, batch 8, 64x64"),
    "vgg11": ("torchvision.models:vgg11", TEN, "4x3x64x64", "torchvision, batch 4, 64x64"),
    "resnet50": ("torchvision.models:resnet50", TEN, "8x3x64x64", "torchvision, batch 8, 64x64"),
    "vit_b_32": ("torchvision.models:vit_b_32", '{"num_classes": 10, "image_size": 64}',
                 "4x3x64x64", "torchvision, batch 4, 64x64"),
    "lstm": ("overlap_export.testing.zoo_modules:recurrent",
             '{"vocab": 1000, "dim": 128, "hidden": 256, "classes": 10}', "8x32:int64:1000",
             "nn.LSTM 2 layers, both directions, hidden 256, batch 8 x 32 tokens"),
    "transformer": ("overlap_export.testing.zoo_modules:transformer",
                    '{"vocab": 1000, "dim": 256, "heads": 8, "ff": 1024, "classes": 10}',
                    "8x64:int64:1000",
                    "nn.TransformerEncoderLayer, dim 256, 8 heads, batch 8 x 64 tokens"),
}
ALL = {**MODELS, **MORE}
WORKS = ["fwd+bwd", "sgd", "adamw"]
OPTIMIZERS = {"sgd": ["--optimizer", "sgd", "--lr", "0.01", "--momentum", "0"],
              "adamw": ["--optimizer", "adamw", "--lr", "1e-3", "--weight-decay", "0.01"]}


def run(cmd, env=None):
    e = dict(os.environ)
    e["PYTHONPATH"] = TOOLS + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    r = subprocess.run(cmd, capture_output=True, text=True, env=e, cwd=TOOLS)
    if r.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd[:3])} ... failed:\n{r.stderr[-2000:]}{r.stdout[-500:]}")
    return r.stdout + r.stderr


def seconds(text):
    """'12.3 ms' / '1.2 s' / '800 us' as seconds."""
    value, unit = text.split()
    return float(value) * {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[unit]


def export(name, work):
    ctor, kwargs, shape, _ = ALL[name]
    prefix = os.path.join(work, name)
    run([PY, "-m", "overlap_export", ctor, "--kwargs", kwargs, "--input", shape, "--aot",
         "--loss", "ce", "-o", prefix, "--weights", prefix + ".safetensors", "--train-data",
         prefix + ".data.safetensors", "--train-steps", "1", "--optimizer", "sgd"])
    return prefix


def overlap_time(overlap, prefix, work, threads, iterations):
    """The median seconds of `work` in one overlap process."""
    graphs = [prefix + ".forward.json", "--backward-graph", prefix + ".backward.json"]
    if work == "fwd+bwd":
        out = run([overlap, "exec"] + graphs + ["--weights", prefix + ".safetensors",
                                                "--threads", str(threads), "--repeat",
                                                str(iterations)])
        return seconds(re.search(r"^repeat: .*together ([0-9.]+ [a-z]+)", out, re.M).group(1))
    data = prefix + ".data.safetensors"
    out = run([overlap, "train", "--graph"] + graphs + [
        "--weights", data, "--data", data, "--steps", str(iterations + 1), "--threads",
        str(threads)] + OPTIMIZERS[work])
    steps = [seconds(t) for t in re.findall(r"^step [0-9]+ loss \S+ time ([0-9.]+ [a-z]+)",
                                            out, re.M)]
    return statistics.median(steps[1:])  # step 1 warms up


MIB = 1 << 20


def size_bytes(text):
    """'20.10 MiB' / '32.00 KiB' / '80 B' as bytes."""
    value, unit = text.split()
    return float(value) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]


def overlap_memory(overlap, prefix):
    """Tensor memory of one forward + backward: the larger graph's peak of graph values and
    kernel scratch held at one time (the saved tensors count in both graphs' peaks; the
    backward holds them from its start, as the simulator counts them)."""
    out = run([overlap, "exec", prefix + ".forward.json", "--backward-graph",
               prefix + ".backward.json", "--weights", prefix + ".safetensors", "--threads", "1"])
    peaks = []
    for m in re.finditer(r"^(forward|backward): .*both at once [^(]*\(([0-9]+) bytes\)", out,
                         re.M):
        peaks.append(int(m.group(2)))
    if len(peaks) != 2:
        sys.exit(f"bench: no measured peaks in overlap exec's output:\n{out[-2000:]}")
    return max(peaks)


def torch_memory(name, prefix):
    out = run([PY, os.path.abspath(__file__), "--torch-memory", name, prefix],
              env={"OMP_NUM_THREADS": "1"})
    return float(re.search(r"^peak ([0-9.e+]+)", out, re.M).group(1))


def torch_peak(name, prefix):
    """PyTorch's profiler: the peak of the bytes its CPU allocator holds for tensors during
    one forward + loss + backward (gradients set to None first, so they are allocated in the
    step, as overlap's backward allocates them; the batch copied in the step, so it counts as
    overlap's graph inputs do), in the order the allocations happened."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    model, x, target, _ = torch_setup(name, prefix, 1)
    from overlap_export import export

    def step():
        # The batch is copied inside the step so that the profiler sees its bytes, as
        # overlap counts its graph inputs (the input and the targets the backward keeps).
        xs, ts = x.clone(), target.clone()
        export._loss_fn("ce", model(xs), ts).backward()

    model.zero_grad(set_to_none=True)
    step()  # warm up
    model.zero_grad(set_to_none=True)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    # Every allocation and free, as the profiler recorded them (signed bytes).
    # (torch 2.x names the start start_ns, 1.13 start_us: the order is what counts.)
    events = sorted(((e.start_ns() if hasattr(e, "start_ns") else e.start_us(), e.nbytes())
                     for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"))
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    print(f"peak {peak}")


def torch_setup(name, prefix, threads):
    import numpy as np
    import torch
    from overlap_export import compare, export
    torch.set_num_threads(threads)
    ctor, kwargs, _, _ = ALL[name]
    model = export.load_model(ctor, json.loads(kwargs)).eval()
    w = compare.read(prefix + ".safetensors")
    state = {k.split("/", 1)[1]: torch.from_numpy(np.array(v))
             for k, v in w.items() if k.startswith(("param/", "buffer/"))}
    model.load_state_dict(state, strict=False)
    x = torch.from_numpy(np.array(w["input/0"]))
    target = torch.from_numpy(np.array(w["target"]))
    return model, x, target, [p for p in model.parameters() if p.requires_grad]


def torch_time(name, prefix, work, threads, iterations, mode="eager"):
    """The median step of PyTorch in a fresh process; mode "eager" or "inductor"."""
    out = run([PY, os.path.abspath(__file__), "--torch-worker", name, prefix, work, str(threads),
               str(iterations), mode], env={"OMP_NUM_THREADS": str(threads)})
    return float(re.search(r"^median ([0-9.e+-]+)", out, re.M).group(1))


def torch_worker(name, prefix, work, threads, iterations, mode):
    import torch
    from overlap_export import export
    model, x, target, params = torch_setup(name, prefix, threads)
    if mode == "inductor":
        # Compiles on the warm-up call: forward and (AOTAutograd's) backward graphs.
        model = torch.compile(model)
    opt = None
    if work == "sgd":
        opt = torch.optim.SGD(params, lr=0.01, momentum=0)
    elif work == "adamw":
        opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
    times = []
    for k in range(iterations + 1):
        start = time.perf_counter()
        if opt is not None:
            opt.zero_grad(set_to_none=True)
        else:
            model.zero_grad(set_to_none=True)
        export._loss_fn("ce", model(x), target).backward()
        if opt is not None:
            opt.step()
        if k > 0:  # the first warms up
            times.append(time.perf_counter() - start)
    print(f"median {statistics.median(times)!r}")


def ddp_data(prefix):
    """The exported batch twice over (global rows = 2 x the graph's), so that each of 2 ranks
    trains on the graph's batch: `overlap run` splits a data file's rows among its ranks."""
    import numpy as np
    import torch
    from overlap_export import compare, safetensors
    d = compare.read(prefix + ".data.safetensors")
    doubled = {k: torch.from_numpy(np.concatenate([np.array(v)] * 2) if k.startswith("batch/")
                                   else np.array(v)) for k, v in d.items()}
    path = prefix + ".ddp.safetensors"
    with open(path, "wb") as f:
        f.write(safetensors.to_bytes(doubled))
    return path


def overlap_ddp_time(overlap, prefix, iterations):
    """The median step of `overlap run --nproc 2 --strategy ddp` (SGD, one thread per rank,
    each rank on the exported batch, 25 MiB buckets as PyTorch DDP's default), steps after
    the first."""
    data = prefix + ".ddp.safetensors"
    out = run([overlap, "run", "--nproc", "2", "--strategy", "ddp", "--graph",
               prefix + ".forward.json", "--backward-graph", prefix + ".backward.json",
               "--weights", prefix + ".data.safetensors", "--data", data, "--steps",
               str(iterations + 1), "--threads", "1", "--bucket-cap", "25MiB"] +
              OPTIMIZERS["sgd"])
    steps = [seconds(t) for t in re.findall(r"^step [0-9]+ loss \S+ time ([0-9.]+ [a-z]+)",
                                            out, re.M)]
    if len(steps) < 2:
        sys.exit(f"bench: no step times in overlap run's output:\n{out[-2000:]}")
    return statistics.median(steps[1:])


def torch_ddp_time(name, prefix, iterations):
    """The median step of PyTorch DDP over Gloo on 2 processes (SGD, one thread each, each
    rank on the exported batch), rank 0's."""
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               WORLD_SIZE="2", PYTHONPATH=TOOLS + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([PY, os.path.abspath(__file__), "--torch-ddp", name, prefix,
                               str(iterations)], env=dict(env, RANK=str(r)), cwd=TOOLS,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode != 0 for p in procs):
        sys.exit(f"bench: PyTorch DDP failed:\n{outs[0][-1500:]}\n{outs[1][-1500:]}")
    return float(re.search(r"^median ([0-9.e+-]+)", outs[0], re.M).group(1))


def torch_ddp_worker(name, prefix, iterations):
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from overlap_export import export
    dist.init_process_group("gloo")
    model, x, target, params = torch_setup(name, prefix, 1)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(params, lr=0.01, momentum=0)
    times = []
    for k in range(iterations + 1):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        export._loss_fn("ce", ddp(x), target).backward()
        opt.step()
        if k > 0:
            times.append(time.perf_counter() - start)
    dist.destroy_process_group()
    print(f"median {statistics.median(times)!r}")


BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def machine():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def write_table(path, rows, memory, ddp, rounds, iterations, seconds_taken):
    import torch
    lines = [BEGIN, "",
             f"*Generated by `tools/bench.py` on {datetime.date.today().isoformat()}: {machine()}; "
             f"torch {torch.__version__}; {rounds} rounds of fresh processes, overlap, PyTorch "
             f"eager and torch.compile (CPU inductor) alternating, each process the median of "
             f"{iterations} iterations after one warm-up (inductor's compilation included in "
             f"the warm-up); {seconds_taken / 60:.0f} minutes. Rerun the script to regenerate.*",
             "",
             "| model | work | threads | overlap | PyTorch eager | overlap / eager | inductor | "
             "overlap / inductor |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, work, threads, ours, theirs, compiled in rows:
        ind = (f"{compiled * 1e3:.1f} ms | {ours / compiled:.2f}" if compiled else "- | -")
        lines.append(f"| {name} | {work} | {threads} | {ours * 1e3:.1f} ms | "
                     f"{theirs * 1e3:.1f} ms | {ours / theirs:.2f} | {ind} |")
    if ddp:
        lines += ["", "2-rank DDP training step over Gloo, one thread per rank, SGD, each rank "
                  "on a batch of the exported size (overlap: `overlap run --nproc 2 --strategy "
                  "ddp --threads 1 --bucket-cap 25MiB`; PyTorch: DistributedDataParallel, "
                  "two processes, its default 25 MiB buckets):", "",
                  "| model | overlap | PyTorch | overlap / PyTorch |", "|---|---:|---:|---:|"]
        for name, ours, theirs in ddp:
            lines.append(f"| {name} | {ours * 1e3:.1f} ms | {theirs * 1e3:.1f} ms | "
                         f"{ours / theirs:.2f} |")
    if memory:
        lines += ["", "Tensor memory of one forward + loss + backward (overlap: the larger graph's "
                  "measured peak of graph values and kernel scratch held at one time; PyTorch: "
                  "the profiler's peak of tensor bytes held, gradients allocated in the step; "
                  "both count the batch, its input and targets):",
                  "",
                  "| model | overlap | PyTorch | overlap / PyTorch |", "|---|---:|---:|---:|"]
        for name, ours, theirs in memory:
            lines.append(f"| {name} | {ours / MIB:.2f} MiB | {theirs / MIB:.2f} MiB | "
                         f"{ours / theirs:.4f} |")
    lines += ["", "Models: " + "; ".join(f"{n}: {m[3]}" for n, m in MODELS.items()) + ".", END]
    doc_block.replace_block(path, BEGIN, END, "\n".join(lines),
                            heading="## overlap against PyTorch eager\n\n")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--torch-worker":
        name, prefix, work, threads, iterations = sys.argv[2:7]
        mode = sys.argv[7] if len(sys.argv) > 7 else "eager"
        return torch_worker(name, prefix, work, int(threads), int(iterations), mode)
    if len(sys.argv) > 1 and sys.argv[1] == "--torch-memory":
        return torch_peak(sys.argv[2], sys.argv[3])
    if len(sys.argv) > 1 and sys.argv[1] == "--torch-ddp":
        return torch_ddp_worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*",
                    help=f"of {', '.join(ALL)} (default: the table's, {', '.join(MODELS)})")
    ap.add_argument("--works", default=",".join(WORKS), help="comma-separated, of " +
                    ", ".join(WORKS))
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    ap.add_argument("--no-memory", dest="memory", action="store_false",
                    help="skip the tensor-memory comparison")
    ap.add_argument("--no-ddp", dest="ddp", action="store_false",
                    help="skip the 2-rank DDP comparison")
    ap.add_argument("--no-inductor", dest="inductor", action="store_false",
                    help="skip torch.compile (CPU inductor)")
    a = ap.parse_args()
    unknown = set(a.models) - set(ALL)
    if unknown:
        ap.error("unknown model(s): " + ", ".join(sorted(unknown)))
    works = a.works.split(",")
    if set(works) - set(WORKS):
        ap.error("unknown work(s): " + ", ".join(sorted(set(works) - set(WORKS))))
    overlap = os.environ.get("OVERLAP")
    if not overlap:
        subprocess.run(["bazel", "build", "//tools:overlap"], cwd=ROOT, check=True,
                       capture_output=True)
        overlap = os.path.join(ROOT, "bazel-bin", "tools", "overlap")
    start = time.time()
    rows, memory, ddp = [], [], []
    with tempfile.TemporaryDirectory(prefix="overlap_bench.") as work_dir:
        for name in a.models or list(MODELS):
            prefix = export(name, work_dir)
            if a.ddp:
                ddp_data(prefix)
                ours, theirs = [], []
                for _ in range(a.rounds):
                    ours.append(overlap_ddp_time(overlap, prefix, a.iterations))
                    theirs.append(torch_ddp_time(name, prefix, a.iterations))
                o, t = statistics.median(ours), statistics.median(theirs)
                ddp.append((name, o, t))
                print(f"bench: {name} 2-rank DDP step: overlap {o * 1e3:.1f} ms, PyTorch "
                      f"{t * 1e3:.1f} ms, ratio {o / t:.2f}", flush=True)
            if a.memory:
                ours, theirs = overlap_memory(overlap, prefix), torch_memory(name, prefix)
                memory.append((name, ours, theirs))
                print(f"bench: {name} tensor memory of a step: overlap {ours / MIB:.1f} MiB, "
                      f"PyTorch {theirs / MIB:.1f} MiB, ratio {ours / theirs:.2f}", flush=True)
            for work in works:
                for threads in [int(t) for t in a.threads.split(",")]:
                    ours, theirs, compiled = [], [], []
                    for _ in range(a.rounds):
                        ours.append(overlap_time(overlap, prefix, work, threads, a.iterations))
                        theirs.append(torch_time(name, prefix, work, threads, a.iterations))
                        if a.inductor:
                            compiled.append(torch_time(name, prefix, work, threads,
                                                       a.iterations, "inductor"))
                    o, t = statistics.median(ours), statistics.median(theirs)
                    c = statistics.median(compiled) if compiled else None
                    rows.append((name, work, threads, o, t, c))
                    also = f", inductor {c * 1e3:.1f} ms, ratio {o / c:.2f}" if c else ""
                    print(f"bench: {name} {work} {threads} thread(s): overlap {o * 1e3:.1f} ms, "
                          f"PyTorch {t * 1e3:.1f} ms, ratio {o / t:.2f}{also}", flush=True)
    if not a.models:
        write_table(a.out, rows, memory, ddp, a.rounds, a.iterations, time.time() - start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
