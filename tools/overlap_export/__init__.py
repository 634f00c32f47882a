"""overlap_export: PyTorch models as overlap graph files (docs/interop.md)."""

from .export import (export_aot, export_module_style, load_model, loss_target, parse_input,
                     unique_parameter_storages, write_json)
from .graph_json import ExportError

__all__ = [
    "ExportError", "export_aot", "export_module_style", "load_model", "loss_target",
    "parse_input", "unique_parameter_storages", "write_json"
]
