"""The exporter's output files, without torch: where each path's bytes go, why a path cannot
be written (checked before the model is loaded), and writing a run's files once all of them
are complete. The contract is the CLI's (graph/output_file.h): the output's folder is
resolved by the kernel, the output's own name is looked at without following it, and a
symbolic link there is replaced, never written through (whatever it points at stays as it
was; in a sticky folder such as /tmp another user's link cannot be replaced, and the write
fails naming the path). The one exception is a link the kernel lets this process follow to
a character device or a FIFO (/dev/stdout), written in place like the device itself."""

import contextlib
import json
import os
import stat
import tempfile

from .errors import ExportError


def _destination(path):
    """(the name the bytes go to, whether they are written there directly): `path` itself,
    replaced by rename when it is nothing, a regular file or a symbolic link (the link gives
    way, its target untouched); written in place when it is a character device or a FIFO,
    or a link the kernel follows to one (/dev/stdout)."""
    folder, name = os.path.split(path)
    # The folder as the kernel resolves it (so "./w" and "w" are one name); the name itself
    # is never followed.
    named = os.path.join(os.path.realpath(folder or "."), name)
    try:
        mode = os.stat(named).st_mode  # follows a link: only to decide device or FIFO
    except OSError:  # none there yet, a dangling link (or a folder on the way is not one)
        return named, False
    return named, stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


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
    folder = os.path.dirname(real) or "."
    shown = os.path.dirname(path) or "."
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
    """A temporary file beside `real` holding `data` (the mode a regular file at `real` has,
    or open()'s; a link's target is never looked at). mkstemp creates it with O_EXCL, so it
    is never a name someone else planted."""
    fd, tmp = tempfile.mkstemp(prefix=".overlap_export.", dir=os.path.dirname(real) or ".")
    try:
        try:
            st = os.lstat(real)
            if not stat.S_ISREG(st.st_mode):
                raise FileNotFoundError(real)
            mode = stat.S_IMODE(st.st_mode)
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
    their paths (atomically each; a symbolic link is replaced, never written through).
    Existing character devices and FIFOs (/dev/null, /dev/stdout) are written in place,
    after the temporary files and before the renames. A failure while writing (a full disk) leaves every path as
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
