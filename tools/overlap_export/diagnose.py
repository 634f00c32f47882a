"""One line for an exception raised while the exporter runs a model's code: which of the
model's modules raised it (its path in the model, `model.blocks.1`, and the method running,
`Router.forward`), the construct when a trace failed on a tensor's value read in Python
(data-dependent control flow, `.item()`), and otherwise the exception and the model's source
line that led to it. docs/interop.md, "What it refuses"."""

import linecache
import os
import re
import sys

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
_LIBRARIES = ("torch", "functorch")
_MODULE_PY = os.path.join("torch", "nn", "modules", "module.py")

# torch's messages for a tensor's value read in Python during a trace: torch.fx's Proxy
# (symbolic tracing), 1.13's make_fx (the AOT trace) and 2.x's fake tensors (the AOT trace:
# `.item()` and `bool(tensor)` reach aten._local_scalar_dense, which a fake tensor cannot
# answer).
_VALUE_READ = ("symbolically traced variables cannot be used as inputs to control flow",
               "get value out of a tracing tensor", "aten._local_scalar_dense",
               "data-dependent expression", "Data dependent variable")


def _frames(e):
    tb = e.__traceback__
    while tb is not None:
        yield tb.tb_frame, tb.tb_lineno
        tb = tb.tb_next


def _is_library(frame):
    """torch's, functorch's, the standard library's or the exporter's own code (its testing
    models excepted), and code that torch.fx generates: frames that are not the model's."""
    path = frame.f_code.co_filename
    if path.startswith("<") or os.path.dirname(os.path.abspath(path)) == _HERE:
        return True
    top = str(frame.f_globals.get("__name__", "")).partition(".")[0]
    return top in _LIBRARIES or top in sys.stdlib_module_names


def module_paths(model):
    """{id(module): its path}: `model` for the root, `model.blocks.1` for a submodule."""
    return {id(m): "model" + ("." + n if n else "") for n, m in model.named_modules()}


def _module_frame(e, paths):
    """(path, method) of the innermost frame running a method of one of the model's modules
    (nn.Module's own dispatch, `_call_impl`, left out), or None."""
    found = None
    for frame, _ in _frames(e):
        this = frame.f_locals.get("self")
        if isinstance(this, torch.nn.Module) and id(this) in paths \
                and not frame.f_code.co_filename.endswith(_MODULE_PY):
            code = frame.f_code
            found = (paths[id(this)],
                     getattr(code, "co_qualname", f"{type(this).__name__}.{code.co_name}"))
    return found


def _model_line(e):
    """(file name, line number, source) of the innermost frame of the model's own code,
    or None."""
    found = None
    for frame, lineno in _frames(e):
        if not _is_library(frame):
            found = (frame.f_code.co_filename, lineno)
    if found is None:
        return None
    path, lineno = found
    return os.path.basename(path), lineno, linecache.getline(path, lineno).strip()


def _value_read(source):
    """What a tensor's value read in Python at `source` is, and what to do instead."""
    code = f"`{source}`" if source else "a line of the model"
    if ".item()" in source:
        return (f"`.item()` ({code}) reads a tensor's value into Python, which a traced graph "
                "cannot hold: keep the value a tensor")
    if re.match(r"(if|elif|while|assert)\b", source) or " if " in source:
        return (f"data-dependent control flow ({code}) cannot be traced: the branch taken "
                "depends on a tensor's value; compute both branches and select with "
                "torch.where, or decide outside the model")
    return (f"{code} reads a tensor's value into Python (bool, int, float, .tolist()), which "
            "a traced graph cannot hold: keep the value a tensor")


def describe(e, model=None):
    """`e` in one sentence: `model.blocks.1 (Router.forward): <what failed>`, the module
    part when `model` is given and one of its modules' code was running; <what failed> is
    the construct for a tensor's value read during a trace, else the exception and the
    model's line `(at file.py:12: `source`)`."""
    where = _module_frame(e, module_paths(model)) if model is not None else None
    line = _model_line(e)
    if any(s in str(e) for s in _VALUE_READ):
        what = _value_read(line[2] if line else "")
    else:
        what = f"{type(e).__name__}: {e}"
        if line:
            what += f" (at {line[0]}:{line[1]}: `{line[2]}`)"
    return f"{where[0]} ({where[1]}): {what}" if where else what
