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
import shutil
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


def spill_folder(path):
    """Where a large output's intermediate files go: its own folder as the kernel resolves
    it (the same file system as its temporary file), or the system's temporary folder when
    the output is a device or a FIFO."""
    real, in_place = _destination(path)
    return None if in_place else (os.path.dirname(real) or ".")


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


def _stage(real, write):
    """A temporary file beside `real` that `write(f)` filled (the mode a regular file at
    `real` has, or open()'s; a link's target is never looked at). mkstemp creates it with
    O_EXCL, so it is never a name someone else planted."""
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
            write(f)
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp


class Outputs:
    """A run's output files, each written to a temporary file as soon as it is complete
    (so a large file's bytes need not stay in memory until the last one is built) and
    renamed over its path only when commit() is called, all of them together (atomically
    each; a symbolic link is replaced, never written through). Existing character devices
    and FIFOs (/dev/null, /dev/stdout) are staged in the system's temporary folder and
    copied there at commit, after every temporary file is complete and before the renames.
    A failure before commit (a full disk, the model failing after its first file) leaves
    every path as it was; a rename that fails (rare: the temporary is in the same folder)
    leaves the files renamed before it new and the rest as they were, never a path removed.
    Leaving the with block without commit() removes the temporary files. Writing errors are
    ExportError("write") naming the path."""

    def __init__(self):
        self._staged, self._direct = [], []  # (path, temporary, destination)

    def add(self, path, write):
        """Stages `path`'s contents, which `write(f)` writes to the binary file `f`."""
        try:
            real, in_place = _destination(path)
            if in_place:
                fd, tmp = tempfile.mkstemp(prefix=".overlap_export.")
                self._direct.append((path, tmp, real))
                with os.fdopen(fd, "wb") as f:
                    write(f)
            else:
                self._staged.append((path, _stage(real, write), real))
        except OSError as e:
            raise ExportError("write", f"{path}: {e.strerror or e}") from e

    def add_bytes(self, path, data):
        """Stages `path` holding `data`."""
        self.add(path, lambda f: f.write(data))

    def commit(self):
        """Writes the devices, then renames every staged file over its path."""
        current = None
        try:
            for path, tmp, real in self._direct:
                current = path
                with open(tmp, "rb") as src, open(real, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 24)
            for path, tmp, real in self._staged:
                current = path
                os.replace(tmp, real)
        except OSError as e:
            raise ExportError("write", f"{current}: {e.strerror or e}") from e

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for _, tmp, _ in self._staged + self._direct:
            with contextlib.suppress(OSError):  # a renamed one is gone already
                os.unlink(tmp)


def write_files(files):
    """Writes each (path, bytes) of `files` as Outputs does: all complete, then renamed."""
    with Outputs() as out:
        for path, data in files:
            out.add_bytes(path, data)
        out.commit()


def json_bytes(doc):
    """A graph document's file contents (compact JSON, a final newline)."""
    return (json.dumps(doc, indent=None, separators=(",", ":")) + "\n").encode()


def write_json(path, doc):
    """Writes `doc` to `path` atomically (a temporary file renamed): no partial file."""
    write_files([(path, json_bytes(doc))])
