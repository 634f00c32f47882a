"""glibc's allocator told to keep the memory a CPU training step frees (docs/torch.md,
"Memory on CPUs").

A step allocates and frees the same tensors every time. With glibc's defaults, a free that
leaves more than the trim threshold free at the top of the heap gives it back to the system
(and a tensor above the mmap threshold is mapped and unmapped each time), so the next step
faults the same pages in again: up to 13,728 page faults a step for resnet18 on 2 ranks
(56 MB, 15% of its step, 2026-12-07), and which runs fault depends on where each one's
tensors lie. CUDA's caching allocator keeps freed memory for the same reason; torch's CPU
launcher (torch.backends.xeon.run_cpu) keeps it by preloading tcmalloc or jemalloc."""

import ctypes
import os
import platform

import torch

# The thresholds KEEP sets, as the environment would set them (bench_util.KEEP_MEMORY).
TRIM_THRESHOLD_BYTES = 1 << 30
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest dynamic threshold on 64-bit
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
_USER_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")
_kept = False


def keep_freed_memory():
    """Sets glibc's trim threshold to 1 GiB and its mmap threshold to 32 MiB for this
    process (mallopt), so that memory a step frees is reused by the next step rather than
    given back and faulted in again; the heap keeps its peak, as a caching allocator does.
    Returns True when the thresholds are set (by this call or an earlier one). Leaves
    the allocator as it is, returning False, where the thresholds are the user's (the
    environment sets MALLOC_*_THRESHOLD_ / MALLOC_TOP_PAD_ or GLIBC_TUNABLES' malloc
    settings), another allocator is preloaded (LD_PRELOAD names a *malloc* library), or the C
    library is not glibc. Process-wide: every later free in the process is affected.
    Cost: two mallopt calls."""
    global _kept
    if _kept:
        return True
    if any(k in os.environ for k in _USER_SETTINGS):
        return False
    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    if "malloc" in os.environ.get("LD_PRELOAD", ""):  # libtcmalloc, libjemalloc, ...
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # The mmap threshold first: setting it turns glibc's dynamic thresholds off, which
    # would otherwise move the trim threshold again on the next large free.
    _kept = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    return _kept


def keep_for(tensors):
    """keep_freed_memory() when any of `tensors` (other values ignored) is on the CPU."""
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type == "cpu":
            return keep_freed_memory()
    return False
