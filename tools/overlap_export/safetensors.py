"""Tensors to the safetensors layout (what runtime/core/safetensors.h reads): an 8-byte
little-endian header length, a JSON header {name: {dtype, shape, data_offsets}}, then the
raw little-endian data in name order. Our own writer: Debian has no python3-safetensors."""

import json
import struct

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


def to_bytes(tensors, metadata=None):
    """The file's bytes for a {name: tensor} dict (contiguous copies, CPU)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        if t.dtype not in _CODES:
            raise ValueError(f"{name}: no safetensors code for {t.dtype}")
        flat = t.reshape(-1)
        if flat.dtype == torch.bfloat16:  # numpy has no bfloat16: its bits as int16
            flat = flat.view(torch.int16)
        data = flat.numpy().tobytes()
        header[name] = {"dtype": _CODES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)  # aligned data, as the reference writer pads
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)
