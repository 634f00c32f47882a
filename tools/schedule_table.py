#!/usr/bin/env python3
"""Regenerates the scheduler comparison table of docs/schedule.md.

    bazel build //:overlap && python3 tools/schedule_table.py [models...] > /tmp/table.md

For each model (default gpt2, llama-7b, llama-70b, moe), forward (--lifted) and backward
(--backward) graphs: every baseline of the scheduler registry (`overlap schedule
--list-algorithms`), then ours with budgets of 1x,
1.25x and 2x fast_free's simulated peak memory and at the smallest budget ours finds
feasible. Each row is one `overlap schedule --json` run; the scheduler's own run time is
the CLI's `scheduler_s` (wall time of the scheduling call alone).
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OVERLAP = os.environ.get("OVERLAP") or os.path.join(ROOT, "bazel-bin", "tools", "overlap")


def run(args, check=True):
    r = subprocess.run([OVERLAP] + args, capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit(f"overlap {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r


def schedule(graph, backward, algorithm, budget=None):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        args = ["schedule", graph, "--algorithm", algorithm, "--json", out.name]
        if backward:
            args.append("--backward")
        if budget is not None:
            args += ["--memory-limit", str(budget)]
        run(args, check=False)
        with open(out.name) as f:
            return json.load(f)


def algorithms():
    """The registry's schedulers (`overlap schedule --list-algorithms`): ours first, then the
    baselines."""
    out = run(["schedule", "--list-algorithms"]).stdout
    names = [line.split("\t")[0] for line in out.splitlines() if line.strip()]
    return names[0], names[1:]


def mib(b):
    return f"{b / 2**20:,.1f} MiB"


def ms(s):
    return f"{s * 1e3:,.1f} ms"


def row(model, pas, label, budget, r, sharded_lb):
    resident = len(r.get("resident_params", []))
    extra = ""
    if "lookahead" in r:
        extra = f"k={r['lookahead']}, {resident} resident"
        if r.get("feasible") is False:
            extra = f"**infeasible** (exit 1; smallest feasible {mib(r['min_feasible_bytes'])}); " + extra
        if r.get("reduce_bucket_bytes"):
            extra += f", RS buckets {r['reduce_bucket_bytes'] >> 20} MiB"
    print(f"| {model} | {pas} | {label} | {budget} | {mib(r['peak_memory_bytes'])} | "
          f"{ms(r['step_time_s'])} | {ms(r['exposed_comm_s'])} | {ms(r['lower_bound_s'])} | "
          f"{r['step_time_s'] / r['lower_bound_s']:.3f} | {r['step_time_s'] / sharded_lb:.3f} | "
          f"{r['scheduler_s'] * 1e3:,.2f} ms | {extra} |")


def main():
    models = sys.argv[1:] or ["gpt2", "llama-7b", "llama-70b", "moe"]
    print("| model | pass | scheduler | budget | peak memory | step time | exposed comm | "
          "lower bound | step / lower bound | step / sharded lower bound | scheduler run time | "
          "ours chose |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    ours, baselines = algorithms()
    with tempfile.TemporaryDirectory() as d:
        for model in models:
            for pas, flag in (("fwd", "--lifted"), ("bwd", "--backward")):
                graph = os.path.join(d, f"{model}-{pas}.json")
                run(["gen", model, flag, "-o", graph])
                bwd = pas == "bwd"
                ff = None
                for alg in baselines:
                    r = schedule(graph, bwd, alg)
                    if alg == "fast_free":
                        ff = r
                    row(model, pas, alg, "-", r, r["lower_bound_s"])
                lb = ff["lower_bound_s"]  # every parameter sharded: all collectives count
                peak = ff["peak_memory_bytes"]
                for label, budget in (("ours @1x", peak), ("ours @1.25x", peak * 5 // 4),
                                      ("ours @2x", peak * 2)):
                    row(model, pas, label, mib(budget), schedule(graph, bwd, ours, budget), lb)
                probe = schedule(graph, bwd, ours, 1)
                least = probe.get("min_feasible_bytes", 1)
                row(model, pas, "ours min feasible", mib(least),
                    schedule(graph, bwd, ours, least), lb)


if __name__ == "__main__":
    main()
