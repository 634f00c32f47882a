"""torch.fx graphs as overlap's interchange format (docs/format.md).

Values map one to one: a node reference is "%name", tuples and lists are arrays, dicts are
objects, slices {"$slice": [...]}, dtypes / devices / layouts / memory formats their str()
("torch.float32"), a string starting with "%" gets another "%". Shapes, dtypes and
tensor_size come from each node's tensor_meta (export.py records it by running the graph).
"""

import math

import torch
import torch.fx

from .errors import ExportError
from .inputs import DTYPES

FORMAT = "overlap-graph"

# torch dtype -> the format's dtype names.
# The format's dtypes (inputs.DTYPES, which --input accepts), by torch's dtype.
_DTYPES = {getattr(torch, name): name for name in DTYPES}


def dtype_name(dtype):
    if dtype not in _DTYPES:
        raise ExportError("metadata", f"no format name for dtype {dtype}")
    return _DTYPES[dtype]


def element_size(dtype):
    return torch.empty((), dtype=dtype).element_size()


def target_name(node):
    """The fully qualified name of a node's target (docs/format.md's targets table)."""
    t = node.target
    if node.op != "call_function":
        return str(t)
    if isinstance(t, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(t)  # aten.relu.default
    # torch.fx's own spelling (torch.flatten, operator.add, torch.nn.functional.relu).
    name = torch.fx.node._get_qualified_name(t)
    if name.startswith("_operator."):
        name = "operator." + name[len("_operator."):]
    if name.startswith("torch._C._nn."):  # where F.gelu and friends live
        name = "torch.nn.functional." + name[len("torch._C._nn."):]
    return name


def value_json(v):
    """One argument value."""
    if isinstance(v, torch.fx.Node):
        return "%" + v.name
    if v is None or isinstance(v, bool) or isinstance(v, int):
        return v
    if isinstance(v, float):
        if math.isnan(v):  # JSON has no spelling: docs/format.md's {"$float": ...}
            return {"$float": "nan"}
        if math.isinf(v):
            return {"$float": "inf" if v > 0 else "-inf"}
        return v
    if isinstance(v, str):
        return "%" + v if v.startswith("%") else v
    if v is Ellipsis:  # x[..., :k] in the graphs torch.compile captures (docs/format.md)
        return "..."
    if isinstance(v, (list, tuple)):
        return [value_json(x) for x in v]
    if isinstance(v, dict):
        return {str(k): value_json(x) for k, x in v.items()}
    if isinstance(v, slice):
        return {"$slice": [value_json(v.start), value_json(v.stop), value_json(v.step)]}
    if isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(v)
    if isinstance(v, torch.Size):
        return list(v)
    raise ExportError("arguments", f"an argument of type {type(v).__name__} ({v!r})")


def meta_json(node, aliases=None):
    """shape / dtype / tensor_size (or shapes / dtypes for tuples) of a node's result."""
    m = {}
    meta = node.meta.get("tensor_meta")  # recorded by export.py's run of the graph
    if meta is None:
        return m
    if isinstance(meta, (list, tuple)) and not hasattr(meta, "shape"):
        shapes, dtypes, size = [], [], 0
        for t in meta:
            if t is None or not hasattr(t, "shape"):
                shapes.append(None)
                dtypes.append(None)
                continue
            shapes.append([int(d) for d in t.shape])
            dtypes.append(dtype_name(t.dtype))
            size += math.prod(t.shape) * element_size(t.dtype)
        m["shapes"] = shapes
        m["dtypes"] = dtypes
        m["tensor_size"] = int(size)
        return m
    m["shape"] = [int(d) for d in meta.shape]
    m["dtype"] = dtype_name(meta.dtype)
    m["tensor_size"] = int(math.prod(meta.shape) * element_size(meta.dtype))
    if aliases is not None and aliases.get(node.name):
        m["aliases_input"] = True
    return m


def node_json(node, extra_meta=None, aliases=None):
    out = {"name": node.name, "op": node.op, "target": target_name(node)}
    if node.op == "output":
        out["args"] = [value_json(node.args[0])]
    else:
        out["args"] = [value_json(a) for a in node.args]
    if node.kwargs:
        out["kwargs"] = {k: value_json(v) for k, v in node.kwargs.items()}
    meta = {} if node.op == "output" else meta_json(node, aliases)
    if extra_meta:
        meta.update(extra_meta.get(node.name, {}))
    if meta:
        out["meta"] = meta
    return out


def graph_json(name, graph, params, extra_meta=None, aliases=None, extra=None, capture=None):
    """The graph file's document. `capture` names how torch captured `graph` ("torch.fx" or
    "aot_autograd"), written with torch's version as the top-level `producer` (docs/format.md;
    readers keep it, the passes ignore it)."""
    doc = {"format": FORMAT, "version": 1, "name": name}
    if capture:
        doc["producer"] = {"torch": torch.__version__.split("+")[0], "capture": capture}
    doc["nodes"] = [node_json(n, extra_meta, aliases) for n in graph.nodes]
    doc["params"] = params
    if extra:
        doc.update(extra)
    return doc
