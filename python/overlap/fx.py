"""torch.fx graphs into overlap's Graph, in memory, by the exporter's own conversion
(tools/overlap_export: the document docs/format.md describes, handed to the C++ reader as
text; no file, no subprocess)."""

import json
import os
import sys


def _exporter():
    """tools/overlap_export, beside this package in the checkout."""
    try:
        from overlap_export import export
    except ImportError:
        tools = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__)))), "tools")
        sys.path.append(tools)
        from overlap_export import export
    return export


def from_fx(gm, example_inputs, model=None, *, name="graph"):
    """The overlap Graph of `gm`, a torch.fx.GraphModule as torch.compile hands it to a
    backend, with the `example_inputs` it came with. A placeholder whose example is a
    parameter of `model` (torch.nn.Module) becomes a lifted parameter (meta.param and the
    parameter table: what the partitioner buckets and ZeRO-3 insertion gathers), named as
    in the model; with no model, a placeholder whose example is a torch.nn.Parameter does,
    named by the placeholder's target (dynamo's `L_self_modules_fc_parameters_weight_`:
    what a torch.compile backend knows). Shapes and dtypes come from dynamo's fake values
    (node.meta["example_value"]). Raises overlap.Error subclasses for what the reader refuses,
    the exporter's ExportError for a graph it cannot write. O(graph size)."""
    from ._overlap import Graph
    export = _exporter()
    doc = export.dynamo_graph_json(gm, list(example_inputs), model, name)
    return Graph.from_json(json.dumps(doc, allow_nan=False))
