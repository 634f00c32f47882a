"""Tensors to the safetensors layout (what runtime/core/safetensors.h reads): an 8-byte
little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}, then the
raw little-endian data. Our own writer: Debian has no python3-safetensors.

Two forms: to_bytes (a small file's bytes at once) and Spill, which writes each tensor's
bytes to a temporary file as the tensor is added and keeps only its name, dtype and shape,
so a large model's reference (gigabytes of float64 gradients and trained parameters) is
never held in memory whole; its data is then copied behind the header by the kernel."""

import json
import os
import struct
import tempfile

import torch

_CODES = {
    torch.float32: "F32",
    torch.float64: "F64",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}


class Unwritable(ValueError):
    """A tensor the format has no code for (its dtype), named."""


def _data(name, tensor):
    """(code, shape, a buffer of the tensor's bytes): a contiguous CPU view, no copy when
    the tensor is one already."""
    t = tensor.detach().to("cpu").contiguous()
    if t.dtype not in _CODES:
        raise Unwritable(f"{name}: no safetensors code for {t.dtype}")
    flat = t.reshape(-1)
    if flat.dtype == torch.bfloat16:  # numpy has no bfloat16: its bits as int16
        flat = flat.view(torch.int16)
    return _CODES[t.dtype], list(t.shape), memoryview(flat.numpy()).cast("B")


def _header(entries, metadata):
    """The 8-byte length and the padded JSON header for {name: (code, shape, begin, end)}."""
    header = {name: {"dtype": code, "shape": shape, "data_offsets": [begin, end]}
              for name, (code, shape, begin, end) in entries.items()}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)  # aligned data, as the reference writer pads
    return struct.pack("<Q", len(text)) + text


def to_bytes(tensors, metadata=None):
    """The file's bytes for a {name: tensor} dict (CPU), tensors in name order."""
    entries, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        code, shape, data = _data(name, tensors[name])
        entries[name] = (code, shape, offset, offset + len(data))
        blobs.append(bytes(data))
        offset += len(data)
    return _header(entries, metadata) + b"".join(blobs)


class Tensors(dict):
    """A {name: tensor} dict with Spill's mark and rollback: what the exporter's reference
    functions write into when no file is behind them (tests, small models)."""

    def mark(self):
        """A point to roll back to: the entries added so far."""
        return len(self)

    def rollback(self, mark):
        """Drops every entry added after `mark`."""
        for name in list(self)[mark:]:
            del self[name]


class Spill:
    """A safetensors file built tensor by tensor: `spill[name] = tensor` writes the bytes to
    a temporary file in `folder` at once (memory: one tensor's contiguous copy, none when it
    is contiguous already); `write_to(f, metadata)` writes the header and copies the data
    behind it. Tensors are laid out in the order they are added. A name added twice is
    overwritten in place when its byte count is the same (anything else is a ValueError: the
    layout stays gapless, as the reference reader requires). `mark` and `rollback` drop the
    tensors added after a point (a float64 reference that failed halfway). close() (or the
    with block) removes the temporary file."""

    def __init__(self, folder=None):
        fd, self._path = tempfile.mkstemp(prefix=".overlap_export.spill.", dir=folder)
        self._file = os.fdopen(fd, "w+b")
        self._entries = {}  # name: (code, shape, begin, end), in the order added
        self._end = 0

    def __setitem__(self, name, tensor):
        code, shape, data = _data(name, tensor)
        old = self._entries.get(name)
        if old is not None:
            if old[3] - old[2] != len(data):
                raise Unwritable(f"{name}: added twice with different byte counts")
            self._file.seek(old[2])
            self._file.write(data)
            self._entries[name] = (code, shape, old[2], old[3])
            return
        self._file.seek(self._end)
        self._file.write(data)
        self._entries[name] = (code, shape, self._end, self._end + len(data))
        self._end += len(data)

    def update(self, tensors):
        for name, tensor in tensors.items():
            self[name] = tensor

    def __contains__(self, name):
        return name in self._entries

    def __len__(self):
        return len(self._entries)

    def keys(self):
        return self._entries.keys()

    def mark(self):
        """A point to roll back to: the entries added so far (an overwrite is not undone)."""
        return len(self._entries)

    def rollback(self, mark):
        """Drops every entry added after `mark` and truncates the data behind them."""
        names = list(self._entries)
        for name in names[mark:]:
            del self._entries[name]
        self._end = self._entries[names[mark - 1]][3] if mark else 0
        self._file.truncate(self._end)

    def write_to(self, f, metadata=None):
        """Writes the whole file to the binary file object `f` (the kernel copies the data
        when `f` is a regular file)."""
        f.write(_header(self._entries, metadata))
        f.flush()
        self._file.flush()
        done, src, dst = 0, self._file.fileno(), f.fileno()
        try:
            while done < self._end:
                n = os.copy_file_range(src, dst, self._end - done, offset_src=done)
                if n == 0:
                    raise OSError(f"{self._path}: ended after {done} of {self._end} bytes")
                done += n
        except (AttributeError, OSError) as e:  # not a file the kernel copies into (a pipe)
            if done and not isinstance(e, AttributeError):
                raise
            self._file.seek(0)
            while done < self._end:
                chunk = self._file.read(min(1 << 24, self._end - done))
                f.write(chunk)
                done += len(chunk)

    def close(self):
        if self._file is not None:
            self._file.close()
            os.unlink(self._path)
            self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
