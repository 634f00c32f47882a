"""overlap from Python: its graph, verifier, annotator, DDP partitioner, ZeRO-3 insertion,
schedulers, step planner and simulator, run in C++ (docs/torch.md).

    import overlap
    g = overlap.from_fx(gm, example_inputs, model)   # a torch.fx graph, in memory
    buckets = overlap.partition(g, bucket_cap_bytes=25 << 20, mode="reference-2x")

A failed call raises overlap.Error (a subclass per kind: InvalidArgumentError is also a
ValueError, NotFoundError a LookupError, ...) carrying the C++ Status's message.
"""

import os as _os

try:
    from . import _overlap
except ImportError as _missing:
    # In a source checkout the extension is Bazel's output: bazel-bin/python/overlap/.
    _built = _os.path.join(_os.path.dirname(_os.path.dirname(_os.path.dirname(
        _os.path.abspath(__file__)))), "bazel-bin", "python", "overlap")
    if not _os.path.exists(_os.path.join(_built, "_overlap.so")):
        raise ImportError("overlap's extension is not built: run `bazel build "
                          "//python:overlap/_overlap.so` in the checkout "
                          f"({_built} has no _overlap.so)") from _missing
    __path__.append(_built)
    from . import _overlap

from ._overlap import (  # noqa: E402
    AbortedError, DeadlineExceededError, Error, FailedPreconditionError, Graph, InternalError,
    InvalidArgumentError, NotFoundError, OutOfRangeError, ResourceExhaustedError,
    UnavailableError, UnimplementedError, annotate, choose_bucket_cap, insert_zero3,
    partition, plan, schedule, schedulers, simulate, verify)
from .fx import from_fx  # noqa: E402

__all__ = [
    "AbortedError", "DeadlineExceededError", "Error", "FailedPreconditionError", "Graph",
    "InternalError", "InvalidArgumentError", "NotFoundError", "OutOfRangeError",
    "ResourceExhaustedError", "UnavailableError", "UnimplementedError", "annotate",
    "choose_bucket_cap", "from_fx",
    "insert_zero3", "partition", "plan", "schedule", "schedulers", "simulate", "verify"]
