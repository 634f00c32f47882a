"""The exporter's output files, without torch: where each path's bytes go (a symbolic link's
target; a device or FIFO in place), why a path cannot be written (checked before the model is
loaded), and writing a run's files once all of them are complete."""

import contextlib
import json
import os
import stat
import tempfile

from .errors import ExportError


def _destination(path):
    """(where `path`'s bytes go, whether they are written there directly): a symbolic link's
    target (the link stays a link), and an existing file that is not a regular one (a
    device such as /dev/null, a FIFO) is written in place, never replaced."""
    real = os.path.realpath(path)
    try:
        mode = os.stat(real).st_mode
    except OSError:  # none there yet (or a folder on the way is not one: output_problem)
        return real, False
    return real, not stat.S_ISREG(mode)


def folder_problem(path):
    """Why `path` names a folder rather than a file (a sentence), or None: it is empty, ends
    with a path separator, or is an existing folder (or a link to one)."""
    if not path:
        return "it is empty"
    if path.endswith(os.sep):
        return "it ends with a path separator (it names a folder)"
    if os.path.isdir(path):
        return "it is an existing folder"
    return None


def output_problem(path):
    """Why `path` cannot be written (a sentence), or None: it names a folder
    (folder_problem), its folder does not exist or is not writable, or it is an existing
    non-regular file that is not writable."""
    problem = folder_problem(path)
    if problem:
        return problem
    real, direct = _destination(path)
    if direct:
        return None if os.access(real, os.W_OK) else "it is not writable"
    folder = os.path.dirname(real)
    shown = folder if os.path.islink(path) else (os.path.dirname(path) or ".")
    if not os.path.isdir(folder):
        if os.path.exists(folder):
            return f"{shown} is not a folder"
        return f"its folder {shown} does not exist"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"its folder {shown} is not writable"
    return None


def same_destination(a, b):
    """Whether outputs `a` and `b` would write the same regular file."""
    ra, da = _destination(a)
    rb, db = _destination(b)
    return ra == rb and not (da or db)


def _stage(real, data):
    """A temporary file beside `real` holding `data` (the mode `real` has, or open()'s)."""
    fd, tmp = tempfile.mkstemp(prefix=".overlap_export.", dir=os.path.dirname(real))
    try:
        try:
            mode = stat.S_IMODE(os.stat(real).st_mode)
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask  # as open() would create it
        os.chmod(tmp, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


def write_files(files):
    """Writes each (path, bytes) of `files`: each regular file is first written to a
    temporary file in its folder, and only when all are complete are they renamed over
    their paths (atomically each; a symbolic link's target, the link kept). Existing paths
    that are not regular files (/dev/null, a FIFO) are written in place, after the temporary
    files and before the renames. A failure while writing (a full disk) leaves every path as
    it was; a rename that fails (rare: the temporary is in the same folder) leaves the files
    renamed before it new and the rest as they were, never a path removed. The temporary
    files are removed, and ExportError("write") names the path."""
    staged, direct = [], []
    current = None
    try:
        for path, data in files:
            current = path
            real, in_place = _destination(path)
            if in_place:
                direct.append((path, real, data))
            else:
                staged.append((path, _stage(real, data), real))
        for path, real, data in direct:
            current = path
            with open(real, "wb") as f:
                f.write(data)
        for path, tmp, real in staged:
            current = path
            os.replace(tmp, real)
    except BaseException as e:
        for _, tmp, _ in staged:
            with contextlib.suppress(OSError):  # a renamed one is gone already
                os.unlink(tmp)
        if isinstance(e, OSError):
            raise ExportError("write", f"{current}: {e.strerror or e}") from e
        raise


def json_bytes(doc):
    """A graph document's file contents (compact JSON, a final newline)."""
    return (json.dumps(doc, indent=None, separators=(",", ":")) + "\n").encode()


def write_json(path, doc):
    """Writes `doc` to `path` atomically (a temporary file renamed): no partial file."""
    write_files([(path, json_bytes(doc))])
