#!/usr/bin/env python3
"""DeepSpeed DeepCompile's own schedulers as the oracle of `overlap schedule`.

    tools/deepcompile_oracle.py                 every model below; exit 1 on a difference
    tools/deepcompile_oracle.py hf_gpt2         the named models only
    tools/deepcompile_oracle.py --quick         the test's subset (//tools:deepcompile_test)

Per model: the AOT forward and backward that torch 2.x gives (overlap_export --aot),
annotated (`overlap annotate`: each node's device_time and tensor_size, which DeepSpeed's
profiler would measure), the dc.* ops inserted (`overlap schedule --insert-only`); then the
same graph ordered by DeepSpeed's functions (deepspeed/compile/list_schedule.py, called as
its passes call them) and by `overlap schedule --algorithm` (fast_free_0.19 for
fast_free_schedule, simple_prefetch for simple_prefetch). fast_free runs without a memory
budget and under DeepSpeed's SchedulerMemoryBudget at a half and an eighth of the graph's
largest possible gathered residency (max_possible_gathered_bytes) and at 0 (no list fits:
each round takes the least overage), ours with --gathered-budget at the same bytes. The
two orders must be equal node for node.

DeepSpeed's dc ops are a C++ extension built for a GPU; its schedulers only compare node
targets with them, so this script declares the same schemas (deepspeed/ops/csrc/compile/
init.cpp) with torch.library and leaves the extension unbuilt. `list_schedule` is not
compared: in DeepSpeed 0.19.8 it unpacks three of init_schedule's six results and raises
(docs/deepcompile.md, "Checked against DeepSpeed").
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

from overlap_python import use_overlap_python  # beside this script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(ROOT, "tools")
PY = use_overlap_python(__file__)  # DeepSpeed runs in this process, under overlap's Python
HF = "overlap_export.testing.hf_models"
LAYERS = "overlap_export.testing.zoo_modules"
TEN = '{"num_classes": 10}'

MODELS = [
    ("hf_gpt2", f"{HF}:gpt2", "{}", "2x8:int64:64"),
    ("hf_llama", f"{HF}:llama", "{}", "2x8:int64:64"),
    ("hf_bert", f"{HF}:bert", "{}", "2x8:int64:64"),
    ("hf_t5", f"{HF}:t5", "{}", "2x8:int64:64"),
    ("hf_vit", f"{HF}:vit", "{}", "2x3x32x32"),
    ("transformer_encoder", f"{LAYERS}:transformer", "{}", "2x6:int64:11"),
    ("mlp_attention", f"{LAYERS}:attention", "{}", "2x6:int64:11"),
    ("resnet18", "torchvision.models:resnet18", TEN, "2x3x32x32"),
    ("mobilenet_v3_small", "torchvision.models:mobilenet_v3_small", TEN, "2x3x32x32"),
]
QUICK = ["hf_gpt2", "transformer_encoder", "resnet18"]
ALGORITHMS = ("fast_free", "simple_prefetch")
# DeepSpeed's function -> ours: fast_free under DeepSpeed 0.19's rules (docs/deepcompile.md,
# "Checked against DeepSpeed"); `fast_free` keeps the rules that page restates.
OURS = {"fast_free": "fast_free_0.19", "simple_prefetch": "simple_prefetch"}

_SCHEMAS = [
    "allgather_param(Tensor a, int graph_id, int id, ScalarType? dtype = None) -> Tensor",
    "wait_allgather(Tensor(a) a, int graph_id, int id) -> Tensor(a)",
    "release_param(Tensor(a) a, int graph_id, int id, int n_users) -> Tensor(a)",
    "reduce_grad(Tensor a, int graph_id, int id) -> Tensor",
]


def declare_dc_ops():
    """torch.ops.dc.* with DeepSpeed's schemas, unless DeepSpeed's extension made them."""
    import torch
    if hasattr(torch.ops.dc, "allgather_param"):
        return
    lib = torch.library.Library("dc", "DEF")  # noqa: F841 - kept alive below
    for schema in _SCHEMAS:
        lib.define(schema)
    declare_dc_ops.lib = lib


def fx_graph(doc):
    """overlap's graph file as a torch.fx Graph: the same node names, order, arguments and
    the meta DeepSpeed reads (tensor_size, device_time); ATen targets as torch's own
    overloads (DeepSpeed finds aliasing ops by them), dc.* as the ops declared above."""
    import torch
    import torch.fx

    graph = torch.fx.Graph()
    env = {}
    stubs = {}

    def target_of(name):
        ns, _, rest = name.partition(".")
        if ns == "dc":  # graph files name them without an overload (docs/format.md)
            return getattr(torch.ops.dc, rest).default
        if ns == "aten":
            op, _, overload = rest.rpartition(".")
            return getattr(getattr(torch.ops.aten, op), overload)
        if name not in stubs:  # operator.getitem and the like: identity is all that matters
            module, _, short = name.rpartition(".")
            # (__module__ / __name__: what a GraphModule's code generation names it by.)
            stubs[name] = type(name, (), {"__call__": lambda self, *a: None,
                                          "__repr__": lambda self: name,
                                          "__module__": module, "__name__": short})()
        return stubs[name]

    def value(v):
        if isinstance(v, str) and v.startswith("%"):
            return v[1:] if v.startswith("%%") else env[v[1:]]
        if isinstance(v, list):
            return [value(x) for x in v]
        if isinstance(v, dict):
            if "$slice" in v:
                return slice(*[value(x) for x in v["$slice"]])
            if "$float" in v:
                return float(v["$float"])
            return {k: value(x) for k, x in v.items()}
        return v

    for n in doc["nodes"]:
        args = tuple(value(a) for a in n.get("args", []))
        kwargs = {k: value(v) for k, v in n.get("kwargs", {}).items()}
        if n["op"] == "placeholder":
            node = graph.placeholder(n["name"])
        elif n["op"] == "output":
            node = graph.output(args[0])
        else:
            node = graph.create_node(n["op"], target_of(n["target"]), args, kwargs, n["name"])
        # torch.fx makes a name with a dot (a parameter's, in a reduce_grad's name) a valid
        # identifier: the order is read back through the original names.
        graph.original_names = getattr(graph, "original_names", {})
        graph.original_names[node.name] = n["name"]
        meta = n.get("meta", {})
        node.meta["tensor_size"] = int(meta.get("tensor_size", 0) or 0)
        node.meta["device_time"] = float(meta.get("device_time", 0.0) or 0.0)
        env[n["name"]] = node
    return graph


def budgets(inserted_path):
    """The gathered-memory budgets fast_free is compared at: DeepSpeed's bound on the
    graph's gathered residency, halved and divided by eight, and 0."""
    from deepspeed.compile import list_schedule
    most = list_schedule.max_possible_gathered_bytes(fx_graph(json.load(open(inserted_path))))
    return [most // 2, most // 8, 0]


def deepspeed_order(inserted_path, algorithm, budget=None):
    """DeepSpeed's order of the inserted graph, node names, the output last; fast_free
    under SchedulerMemoryBudget(budget) when `budget` is not None."""
    from deepspeed.compile import list_schedule, util
    util.get_deepcompile_handle = lambda: None  # the ops are declared: nothing to build
    graph = fx_graph(json.load(open(inserted_path)))
    output_size = 0
    if algorithm == "fast_free":
        limit = None if budget is None else list_schedule.SchedulerMemoryBudget(
            max_gathered_bytes=budget, source="deepcompile_oracle")
        out = list_schedule.fast_free_schedule(graph, 0, output_size, False,
                                               scheduler_budget=limit)
    else:
        out = list_schedule.simple_prefetch(graph, 0, output_size, False)
    return [graph.original_names.get(n.name, n.name) for n in out.nodes]


def overlap_order(overlap, inserted_path, algorithm, backward, work, budget=None):
    out = os.path.join(work, f"ours.{algorithm}.json")
    subprocess.run([overlap, "schedule", inserted_path, "--algorithm", algorithm, "-o", out]
                   + (["--backward"] if backward else [])
                   + ([] if budget is None else ["--gathered-budget", str(budget)]),
                   check=True, capture_output=True, text=True)
    return [n["name"] for n in json.load(open(out))["nodes"]]


def check_overlap_pass(name, which, inserted_path):
    """overlap.deepspeed.schedule on the inserted graph as a DeepCompile torch.fx Graph (its
    dc ops, node.meta's tensor_size and device_time, nothing else) against overlap's
    lookahead on the graph file itself (shapes, the parameter table): the conversion must
    keep everything the scheduler reads, so the orders are equal; the returned Graph holds
    every node once, in a topological order (torch.fx's lint)."""
    import overlap
    import overlap.deepspeed
    from deepspeed.compile import util
    util.get_deepcompile_handle = lambda: None
    doc = json.load(open(inserted_path))
    graph = fx_graph(doc)
    new = overlap.deepspeed.schedule(graph, 0, 0, False)
    theirs = [graph.original_names.get(n.name, n.name) for n in new.nodes]
    g = overlap.Graph.from_json(json.dumps(doc))
    ours = overlap.schedule(g, keep_residents=False)["order"]
    same = theirs == ours and len(list(new.nodes)) == len(list(graph.nodes))
    # As a DeepCompile pass (run_opt_passes' signature) on a GraphModule, and installed in
    # DeepCompile's ZeRO-3 pass in fast_free_schedule's place: the same order.
    import torch
    from deepspeed.compile.passes import zero3_compile
    gm = torch.fx.GraphModule(torch.nn.Module(), fx_graph(doc))
    gm = overlap.deepspeed.schedule_pass(gm, 0, [], {}, None, 0, None, which == "backward")
    same = same and [graph.original_names.get(n.name, n.name) for n in gm.graph.nodes] == ours
    replaced = overlap.deepspeed.install()
    try:
        same = same and zero3_compile.fast_free_schedule is overlap.deepspeed.schedule
    finally:
        zero3_compile.fast_free_schedule = replaced
    print(f"deepcompile: {name} {which} overlap.deepspeed.schedule: {len(theirs)} nodes, "
          + ("equal to lookahead on the file" if same else
             f"DIFFERS: {theirs[:6]} ... against {ours[:6]} ..."), flush=True)
    return same


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS),
                    help="which of fast_free, simple_prefetch (comma-separated)")
    ap.add_argument("--overlap-pass", action="store_true",
                    help="check overlap's DeepCompile scheduler (overlap.deepspeed.schedule, "
                    "DeepCompile's scheduler signature) instead: on the torch.fx graph "
                    "DeepCompile would hand it, its order must equal overlap's lookahead on "
                    "the graph file")
    a = ap.parse_args()
    sys.path.insert(0, TOOLS)
    sys.path.insert(0, os.path.join(ROOT, "python"))  # overlap's package, for --overlap-pass
    overlap = os.environ.get("OVERLAP") or os.path.join(ROOT, "bazel-bin", "tools", "overlap")
    unknown = set(a.models) - {m[0] for m in MODELS}
    if unknown:
        ap.error("unknown model(s): " + ", ".join(sorted(unknown)))
    chosen = [m for m in MODELS if (not a.models or m[0] in a.models)
              and (not a.quick or m[0] in QUICK)]
    declare_dc_ops()
    differ = compared = 0
    with tempfile.TemporaryDirectory(prefix="overlap_dc.") as work:
        for name, ctor, kwargs, shape in chosen:
            prefix = os.path.join(work, name)
            env = dict(os.environ, PYTHONPATH=TOOLS)
            r = subprocess.run([PY, "-m", "overlap_export", ctor, "--kwargs", kwargs, "--input",
                                shape, "--aot", "--loss", "ce", "-o", prefix],
                               capture_output=True, text=True, env=env)
            if r.returncode != 0:
                differ += 1
                print(f"deepcompile: {name}: export FAILED: {r.stderr.strip()[-300:]}",
                      flush=True)
                continue
            for which in ("forward", "backward"):
                graph = f"{prefix}.{which}.json"
                annotated, inserted = graph + ".annotated", graph + ".inserted"
                subprocess.run([overlap, "annotate", graph, "-o", annotated], check=True,
                               capture_output=True)
                subprocess.run([overlap, "schedule", annotated, "--insert-only", "-o", inserted]
                               + (["--backward"] if which == "backward" else []),
                               check=True, capture_output=True)
                if a.overlap_pass:
                    compared += 1
                    differ += not check_overlap_pass(name, which, inserted)
                    continue
                cases = []
                for algorithm in a.algorithms.split(","):
                    cases.append((algorithm, None))
                    if algorithm == "fast_free":
                        cases += [(algorithm, b) for b in budgets(inserted)]
                for algorithm, budget in cases:
                    compared += 1
                    theirs = deepspeed_order(inserted, algorithm, budget)
                    ours = overlap_order(overlap, inserted, OURS[algorithm],
                                         which == "backward", work, budget)
                    if budget is not None:
                        algorithm = f"{algorithm} (budget {budget:,} B)"
                    # DeepSpeed's simple_prefetch can leave a reduce_grad (used by no one)
                    # after the output node; a graph file's output comes last (docs/format.md),
                    # so the orders are compared without it.
                    moved = theirs[-1] != "output"
                    theirs = [n for n in theirs if n != "output"]
                    ours = [n for n in ours if n != "output"]
                    if theirs == ours:
                        print(f"deepcompile: {name} {which} {algorithm}: {len(ours)} nodes, "
                              "equal" + (" (DeepSpeed put the output before its last reduce)"
                                         if moved else ""), flush=True)
                        continue
                    differ += 1
                    at = next((i for i, (t, o) in enumerate(zip(theirs, ours)) if t != o),
                              min(len(theirs), len(ours)))
                    print(f"deepcompile: {name} {which} {algorithm}: DIFFERS at position {at} "
                          f"of {len(ours)}: DeepSpeed {theirs[at:at + 4]}, overlap "
                          f"{ours[at:at + 4]}", flush=True)
    print(f"deepcompile: {compared - differ} of {compared} orders equal", flush=True)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
