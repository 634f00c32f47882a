"""overlap_export: PyTorch models as overlap graph files (docs/interop.md).

The names below load torch on first use (PEP 562), so that the command line's usage checks
and overlap_export.compare (numpy only) start without it.
"""

import logging as _logging
import warnings as _warnings

from .errors import ExportError
from .files import write_json

# torch 2.x's flop counter logs a warning on first use when triton (torch.compile's GPU code
# generator, which overlap's environment leaves out: tools/requirements.txt) is missing: news
# about torch's set-up, not about the model, and a second line on the exporter's stderr.
_logging.getLogger("torch.utils.flop_counter").setLevel(_logging.ERROR)
# torch 2.x's deprecation notices for APIs a model calls (nn.utils.weight_norm): about the
# model's source, which exports as it is; stderr stays the exporter's notes and errors.
_warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch(\.|$)")

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
