#!/usr/bin/env python3
"""Regenerates the scheduler comparison table of docs/schedule.md.

    bazel build //:overlap && python3 tools/schedule_table.py [models...] > /tmp/table.md

For each model (default gpt2, llama-7b, llama-70b, moe), forward (--lifted) and backward
(--backward) graphs: every baseline of the scheduler registry (`overlap schedule
--list-algorithms`), then ours at the smallest baseline peak and at 1x, 1.1x, 1.25x and 2x
fast_free's simulated peak memory, each against the fastest baseline whose peak fits that
budget, and ours under an 80 GB device (`--device-memory 80GB`). Each row is one `overlap
schedule --json` run; the scheduler's own run time is the CLI's `scheduler_s`.
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


def schedule(graph, backward, algorithm, budget=None, device=None):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        args = ["schedule", graph, "--algorithm", algorithm, "--json", out.name]
        if backward:
            args.append("--backward")
        if budget is not None:
            args += ["--memory-limit", str(budget)]
        if device is not None:
            args += ["--device-memory", device]
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
    return f"{s * 1e3:,.2f} ms"


def chose(r):
    """What ours chose: its order's base, k, residents, reduce-scatter buckets."""
    base = r.get("base", "prefetch")
    text = f"k={r['lookahead']}" if base == "prefetch" else f"{base}'s order"
    text += f", {len(r.get('resident_params', []))} resident"
    if r.get("reduce_bucket_bytes"):
        text += f", RS buckets {r['reduce_bucket_bytes'] >> 20} MiB"
    return text


def main():
    models = sys.argv[1:] or ["gpt2", "llama-7b", "llama-70b", "moe"]
    ours, baselines = algorithms()
    baseline_rows = []
    print("| model | pass | budget | fastest fitting baseline | its peak | its step | ours: peak | "
          "ours: step | ours / baseline | ours chose |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        for model in models:
            for pas, flag in (("fwd", "--lifted"), ("bwd", "--backward")):
                graph = os.path.join(d, f"{model}-{pas}.json")
                run(["gen", model, flag, "-o", graph])
                bwd = pas == "bwd"
                fits = {}
                for alg in baselines:
                    r = schedule(graph, bwd, alg)
                    fits[alg] = r
                    baseline_rows.append((model, pas, alg, r))
                ff = fits["fast_free"]["peak_memory_bytes"]
                smallest = min(r["peak_memory_bytes"] for r in fits.values())
                budgets = [("smallest baseline peak", smallest), ("1x fast_free", ff),
                           ("1.1x", ff * 11 // 10), ("1.25x", ff * 5 // 4), ("2x", ff * 2)]
                for label, budget in budgets:
                    fitting = [(r["step_time_s"], a) for a, r in fits.items()
                               if r["peak_memory_bytes"] <= budget]
                    o = schedule(graph, bwd, ours, budget)
                    if fitting:
                        step, alg = min(fitting)
                        b = fits[alg]
                        base = (f"{alg} | {mib(b['peak_memory_bytes'])} | {ms(step)} | ")
                        ratio = f"{o['step_time_s'] / step:.3f}"
                    else:
                        base, ratio = "none fits | - | - | ", "-"
                    verdict = chose(o) if o.get("feasible", True) else (
                        f"**infeasible**: the smallest feasible budget is "
                        f"{mib(o['min_feasible_bytes'])}")
                    print(f"| {model} | {pas} | {label}: {mib(budget)} | {base}"
                          f"{mib(o['peak_memory_bytes'])} | {ms(o['step_time_s'])} | {ratio} | "
                          f"{verdict} |")
                dev = schedule(graph, bwd, ours, device="80GB")
                verdict = chose(dev) if dev.get("feasible", True) else (
                    f"**infeasible**: the smallest feasible budget is "
                    f"{mib(dev['min_feasible_bytes'])}")
                print(f"| {model} | {pas} | 80 GB device: {mib(dev['budget_bytes'])} | - | - | - | "
                      f"{mib(dev['peak_memory_bytes'])} | {ms(dev['step_time_s'])} | - | "
                      f"{verdict} |")
    print()
    print("| model | pass | baseline | peak memory | step | exposed comm | lower bound | "
          "scheduler run time |")
    print("|---|---|---|---|---|---|---|---|")
    for model, pas, alg, r in baseline_rows:
        print(f"| {model} | {pas} | {alg} | {mib(r['peak_memory_bytes'])} | {ms(r['step_time_s'])} | "
              f"{ms(r['exposed_comm_s'])} | {ms(r['lower_bound_s'])} | "
              f"{r['scheduler_s'] * 1e3:,.2f} ms |")


if __name__ == "__main__":
    main()
