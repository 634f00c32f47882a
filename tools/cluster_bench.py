#!/usr/bin/env python3
"""The simulator's step against the one-machine cluster's (tools/cluster.sh), as a table.

    tools/cluster_bench.py                       the default matrix; prints the table
    tools/cluster_bench.py --write               and rewrites docs/benchmarks.md's block
    tools/cluster_bench.py --hosts 2 --strategies zero3 --modes replay --repeat 1
    tools/cluster_bench.py --models gpt2 --rate 20mbit --hosts 2   kilobyte collectives

For every (hosts, strategy, mode) it runs one job across that many namespaced hosts
(`tools/cluster.sh job N --rate R -- ...`, as root) with `--calibrate`: the ranks measure
the collectives on the rate-limited links and, with real kernels, time every node of the
model on this CPU as the ranks share it, then train with each scheduler (ZeRO-3: all of
them; DDP: its reducer) and print the predicted step and hidden fraction beside the
measured ones (rank 0's table). `replay` is timed replay (`--time-scale`: compute waits
the cost model's device times x the scale, collectives real); `real` runs the kernels.

A case passes when every row's measured step is within --tolerance (10%) of its predicted
one, its measured hidden fraction within 10 points of the predicted, and the schedulers'
measured order is the predicted one for every pair predicted more than --order-gap (5%)
apart (closer pairs are ties the prediction does not order). Exit status 1 when a case
fails or does not run; the table says which and why.

Needs root and iproute2 (the cluster) and the built CLI (OVERLAP, or bazel-bin's).
"""

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import time

import doc_block  # tools/doc_block.py, beside this script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN = "<!-- cluster-bench:begin -->"
END = "<!-- cluster-bench:end -->"

# The built-in models at sizes where communication matters at the link's rate: megabytes
# of parameters (6 layers of 768 x 768: 13.6 MiB), so a collective's time is its bytes over
# the link (2.3 MiB a layer: 47 ms at 400 Mbit/s), not its latency, and compute of the same
# order on this CPU (about 170 ms a step at 1,024 rows a rank).
# (flags, global batch: each of N hosts trains on batch / N rows)
# gpt2 at its tiny preset (the preset's batch on every host): collectives of kilobytes, so
# their latency and the link's shaping of small messages, not its rate, set their time.
MODELS = {
    "mlp": (["--model", "mlp", "--layers", "6", "--width", "768"], 2048),
    "gpt2": (["--model", "gpt2"], None),
}

ROW = re.compile(r"^\[host 0 [0-9.]+\] (\S+)\s+([0-9.]+ [mun]?s)\s+([0-9.]+ [mun]?s)\s+"
                 r"([0-9.]+)\s+([0-9.]+)%\s+([0-9.]+)%$")


def seconds(text):
    value, unit = text.split()
    return float(value) * {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[unit]


def overlap_binary():
    path = os.environ.get("OVERLAP") or os.path.join(ROOT, "bazel-bin", "tools", "overlap")
    if not os.access(path, os.X_OK):
        sys.exit(f"cluster_bench: no overlap CLI at {path} (bazel build //tools:overlap, or "
                 "set OVERLAP)")
    return os.path.abspath(path)


def run_case(args, model, hosts, strategy, mode):
    """Rank 0's rows [(name, predicted_s, measured_s, predicted_hidden, hidden)] and the
    job's output; rows is None when the job failed."""
    shape, batch = MODELS[model]
    flags = shape + (["--batch", str(batch // hosts)] if batch else []) + [
        "--strategy", strategy, "--steps", str(args.steps), "--calibrate", "--threads", "1",
        "--timeout", "300"]
    if strategy == "zero3":
        flags += ["--algorithm", "all"]
    if mode == "replay":
        flags += ["--time-scale", str(args.time_scale)]
    cmd = [os.path.join(ROOT, "tools", "cluster.sh"), "job", str(hosts), "--rate", args.rate,
           "--prefix", "ovb", "--"] + flags
    env = dict(os.environ, OVERLAP=overlap_binary())
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rows = []
    for line in p.stdout.splitlines():
        m = ROW.match(line.strip())
        if m and m.group(1) != "algorithm":
            rows.append((m.group(1), seconds(m.group(2)), seconds(m.group(3)),
                         float(m.group(5)) / 100, float(m.group(6)) / 100))
    return (rows if p.returncode == 0 and rows else None), p.stdout


def verdict(rows, args):
    """The reasons a case fails (empty: it passes)."""
    why = []
    for name, pred, meas, ph, h in rows:
        if abs(meas / pred - 1) > args.tolerance:
            why.append(f"{name}: measured/predicted {meas / pred:.2f}")
        if abs(h - ph) > 0.10:
            why.append(f"{name}: hidden {100 * h:.0f}% against {100 * ph:.0f}%")
    for a in rows:
        for b in rows:
            if a[1] * (1 + args.order_gap) < b[1] and a[2] >= b[2]:
                why.append(f"order: {a[0]} predicted faster than {b[0]}, measured not")
    return why


def median(xs):
    xs = sorted(xs)
    k = len(xs)
    return xs[k // 2] if k % 2 else (xs[k // 2 - 1] + xs[k // 2]) / 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hosts", default="2,4")
    ap.add_argument("--strategies", default="ddp,zero3")
    ap.add_argument("--modes", default="replay,real")
    ap.add_argument("--models", default="mlp")
    ap.add_argument("--rate", default="400mbit")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--time-scale", type=float, default=3000)
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per case; the table gives each row's medians")
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("--order-gap", type=float, default=0.05)
    ap.add_argument("--write", action="store_true", help="rewrite docs/benchmarks.md's block")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("cluster_bench: the cluster needs root (network namespaces)")
    lines = ["| model | hosts | rate | strategy | mode | scheduler | predicted | measured | "
             "measured / predicted | hidden predicted | hidden measured |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    failures = []
    for model in args.models.split(","):
        for hosts in [int(h) for h in args.hosts.split(",")]:
            for strategy in args.strategies.split(","):
                for mode in args.modes.split(","):
                    case = f"{model}, {hosts} hosts, {strategy}, {mode}"
                    runs = []
                    for k in range(args.repeat):
                        t0 = time.time()
                        rows, out = run_case(args, model, hosts, strategy, mode)
                        print(f"cluster_bench: {case} (run {k + 1}/{args.repeat}): "
                              f"{time.time() - t0:.0f} s", file=sys.stderr, flush=True)
                        if rows is None:
                            failures.append(f"{case}: the job failed")
                            print(out[-4000:], file=sys.stderr)
                            break
                        runs.append(rows)
                    if not runs:
                        continue
                    rows = []
                    for i, r in enumerate(runs[0]):
                        rows.append((r[0],) + tuple(median([run[i][j] for run in runs])
                                                     for j in range(1, 5)))
                    why = verdict(rows, args)
                    failures += [f"{case}: {w}" for w in why]
                    for name, pred, meas, ph, h in rows:
                        lines.append(
                            f"| {model} | {hosts} | {args.rate} | {strategy} | {mode} | {name} | "
                            f"{pred * 1e3:.1f} ms | {meas * 1e3:.1f} ms | {meas / pred:.2f} | "
                            f"{100 * ph:.1f}% | {100 * h:.1f}% |")
    table = "\n".join(lines)
    print(table)
    for f in failures:
        print("FAIL " + f)
    if args.write:
        stamp = (f"Measured {datetime.date.today().isoformat()} on {platform.node() or 'this'}"
                 f" ({os.cpu_count()} cores), `tools/cluster_bench.py --hosts {args.hosts} "
                 f"--strategies {args.strategies} --modes {args.modes} --models {args.models} "
                 f"--rate {args.rate} --steps {args.steps} --time-scale {args.time_scale:g} "
                 f"--repeat {args.repeat}`; medians over the runs. "
                 f"{'Every case passes' if not failures else 'Failing: ' + '; '.join(failures)}.")
        doc_block.replace_block(os.path.join(ROOT, "docs", "benchmarks.md"), BEGIN, END,
                                f"{BEGIN}\n{stamp}\n\n{table}\n{END}",
                                heading="## Overlap on the one-machine cluster\n\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
