"""overlap's scheduler inside DeepSpeed's DeepCompile (docs/torch.md, "DeepSpeed").

    from deepspeed.compile.backend import register_compile_pass
    import overlap.deepspeed
    register_compile_pass("overlap_schedule", overlap.deepspeed.schedule_pass)

`schedule` has the signature of DeepCompile's own schedulers (deepspeed/compile/
list_schedule.py's fast_free_schedule: graph, available_mem, output_size, debug_log,
scheduler_budget): it takes the torch.fx Graph DeepCompile's ZeRO-3 pass made (its dc ops
inserted, each node's profiled `tensor_size` and `device_time` in node.meta) and returns a
new Graph with the same nodes in the order overlap's scheduler chooses. `schedule_pass` is
the same as one of DeepCompile's optimisation passes (the signature run_opt_passes calls),
for `register_compile_pass`; `install()` makes DeepCompile's ZeRO-3 pass call `schedule`
where it calls fast_free_schedule.
"""

import json

import torch
import torch.fx

from . import _overlap


def _target(node):
    """The graph format's target: dc ops without their overload (docs/format.md), ATen's
    as torch prints them, anything else by its qualified name."""
    t = node.target
    if node.op != "call_function":
        return str(t)
    if isinstance(t, torch._ops.OpOverload):
        name = str(t)
        if name.startswith("dc."):
            return name.rsplit(".", 1)[0] if name.endswith(".default") else name
        return name
    try:
        return torch.fx.node._get_qualified_name(t).replace("_operator.", "operator.", 1)
    except (AttributeError, RuntimeError, TypeError):
        return repr(t)  # a callable object without a qualified name: its own spelling


def graph_document(graph, name="deepcompile"):
    """The graph format's document (docs/format.md) of a DeepCompile graph: node names,
    order and arguments as they are; meta.tensor_size and meta.device_time from the
    profiler's node.meta (0 where it measured nothing)."""
    from overlap_export.graph_json import value_json
    nodes = []
    for n in graph.nodes:
        entry = {"name": n.name, "op": n.op, "target": _target(n)}
        entry["args"] = [value_json(a) for a in n.args]
        if n.kwargs:
            entry["kwargs"] = {k: value_json(v) for k, v in n.kwargs.items()}
        if n.op not in ("placeholder", "output"):
            entry["meta"] = {"tensor_size": int(n.meta.get("tensor_size", 0) or 0),
                             "device_time": float(n.meta.get("device_time", 0.0) or 0.0)}
        elif n.op == "placeholder":
            entry["meta"] = {"tensor_size": int(n.meta.get("tensor_size", 0) or 0)}
        nodes.append(entry)
    return {"format": "overlap-graph", "version": 1, "name": name, "nodes": nodes,
            "params": _parameter_table(graph, nodes)}


_DC_OPS = ("dc.allgather_param", "dc.wait_allgather", "dc.release_param", "dc.reduce_grad")


def _parameter_table(graph, nodes):
    """The parameter table the dc ops index (docs/format.md: args[2], ds_id, is a row of
    it), rebuilt from the graph: row ds_id is the placeholder an allgather gathers (marked
    meta.param), with the allgather's profiled bytes; a ds_id only a reduce_grad names gets
    its gradient's bytes; a row no op names is an absent row (an owner naming no node)."""
    entry_of = {e["name"]: e for e in nodes}
    rows = {}
    for n in graph.nodes:
        target = _target(n) if n.op == "call_function" else ""
        if target not in _DC_OPS or len(n.args) < 3 or not isinstance(n.args[2], int):
            continue
        ds_id, source = n.args[2], n.args[0]
        row = rows.setdefault(ds_id, {"name": f"ds_param_{ds_id}", "owner": f"ds_param_{ds_id}",
                                      "bytes": 0})
        if target == "dc.allgather_param" and isinstance(source, torch.fx.Node) \
                and source.op == "placeholder":
            row.update(name=source.name, owner=source.name,
                       bytes=int(n.meta.get("tensor_size", 0) or 0))
            entry_of[source.name].setdefault("meta", {})["param"] = source.name
        elif target == "dc.reduce_grad" and not row["bytes"] \
                and isinstance(source, torch.fx.Node):
            row["bytes"] = int(source.meta.get("tensor_size", 0) or 0)
    table = []
    for ds_id in range(max(rows, default=-1) + 1):
        table.append(rows.get(ds_id, {"name": f"ds_param_{ds_id}",
                                      "owner": f"ds_param_{ds_id}", "bytes": 0}))
    return table


def order(graph, budget_bytes=None, algorithm="lookahead"):
    """The node names of `graph` (a DeepCompile torch.fx Graph) in the order scheduler
    `algorithm` chooses under `budget_bytes` of gathered parameters (None: no limit).
    Ours holds no parameter across the graph (keep_residents=False) and its reduce-scatter
    buckets are not applied: DeepSpeed's dc ops express neither, so only the order is."""
    from .fx import _exporter
    _exporter()  # overlap_export on the path (graph_json's value encoding)
    g = _overlap.Graph.from_json(json.dumps(graph_document(graph), allow_nan=False))
    report = _overlap.schedule(g, algorithm=algorithm, budget_bytes=budget_bytes,
                               keep_residents=False)
    return report["order"]


def reordered(graph, names):
    """A new Graph holding `graph`'s nodes in the order `names` gives (each node copied
    once; names that are not `graph`'s are skipped), as DeepCompile's schedulers return."""
    by_name = {n.name: n for n in graph.nodes}
    new = torch.fx.Graph()
    env = {}
    for name in names:
        node = by_name.get(name)
        if node is not None and node not in env:
            env[node] = new.node_copy(node, lambda n: env[n])
    missing = [n.name for n in graph.nodes if n not in env]
    if missing:
        raise ValueError(f"overlap.deepspeed: the order leaves out {len(missing)} node(s), "
                         f"first {missing[0]!r}")
    new.lint()
    return new


def schedule(graph, available_mem, output_size, debug_log, *, scheduler_budget=None):
    """DeepCompile's scheduler signature: `graph` ordered by overlap's lookahead scheduler.
    The budget is the scheduler budget's gathered bytes when DeepCompile gives one (its
    max_gathered_bytes), else `available_mem` when positive, else none. output_size and
    debug_log are accepted and unused, as by DeepCompile's own schedulers."""
    budget = getattr(scheduler_budget, "max_gathered_bytes", None)
    if budget is None and available_mem and available_mem > 0:
        budget = int(available_mem)
    return reordered(graph, order(graph, budget))


def schedule_pass(gm, graph_id, graph_order, profiling_results, create_inputs_fn, mem_budget,
                  param_manager, bwd):
    """A DeepCompile optimisation pass (what run_opt_passes calls; register it with
    deepspeed.compile.backend.register_compile_pass): reorders `gm`'s graph by overlap's
    scheduler, after DeepCompile's ZeRO-3 pass inserted its ops."""
    gm.graph = schedule(gm.graph, 0, 0, False)
    gm.recompile()
    return gm


def install():
    """Makes DeepCompile's ZeRO-3 pass (deepspeed/compile/passes/zero3_compile.py) call
    `schedule` where it calls fast_free_schedule. Returns the function it replaced."""
    from deepspeed.compile.passes import zero3_compile
    replaced = zero3_compile.fast_free_schedule
    zero3_compile.fast_free_schedule = schedule
    return replaced
