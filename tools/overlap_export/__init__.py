"""overlap_export: PyTorch models as overlap graph files (docs/interop.md).

The names below load torch on first use (PEP 562), so that the command line's usage checks
and overlap_export.compare (numpy only) start without it.
"""

from .errors import ExportError
from .files import write_json

__all__ = [
    "ExportError", "export_aot", "export_module_style", "load_model", "loss_target",
    "parse_input", "unique_parameter_storages", "write_json"
]

_FROM_EXPORT = set(__all__) - {"ExportError", "write_json"}


def __getattr__(name):
    if name in _FROM_EXPORT:
        from . import export
        return getattr(export, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
