"""Tensor files the C++ judge reads (kernel_eval/tensor_file.h).

Layout: 8-byte magic "CATNSR01", u32 little-endian header length, a JSON header
{"dtype": "float32", "shape": [2, 3]}, then the C-contiguous little-endian bytes.
"""
import json
import struct

import torch

MAGIC = b"CATNSR01"

DTYPE_NAMES = {
    torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.int8: "int8", torch.uint8: "uint8", torch.int16: "int16",
    torch.int32: "int32", torch.int64: "int64", torch.bool: "bool",
}


def dtype_name(dtype):
    return DTYPE_NAMES.get(dtype, str(dtype))


def save(path, tensor, opener=open):
    t = tensor.detach().to("cpu").contiguous()
    if t.dtype not in DTYPE_NAMES:
        raise TypeError("unsupported output dtype %s" % t.dtype)
    header = json.dumps({"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape)}).encode()
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    with opener(path, "wb") as f:
        f.write(MAGIC + struct.pack("<I", len(header)) + header + raw)
