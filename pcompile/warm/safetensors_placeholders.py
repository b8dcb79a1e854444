"""A safetensors file of virtual tensors: the real header (names, dtypes, shapes, offsets, metadata)
and a data region that is a hole in a sparse file, so it costs O(1) disk per tensor and loads
anywhere (the hole reads as zeros). safetensors writes by path from native code, so the file is
written here instead (protect.py routes `safetensors.torch.save_file` of virtual tensors to it)."""
from __future__ import annotations

import json
import os
import struct
from typing import Any


def _dtype_names() -> dict[Any, str]:
    import safetensors.torch as st

    return {dtype: name for name, dtype in getattr(st, "_TYPES", {}).items()}


def write(tensors: dict[str, Any], path: Any, metadata: dict[str, str] | None = None) -> None:
    """`tensors` (name -> tensor; no values read) as a safetensors file at `path`."""
    names = _dtype_names()
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    offset = 0
    for name, t in tensors.items():
        if t.dtype not in names:
            raise ValueError(f"safetensors has no dtype for {t.dtype} (tensor {name!r})")
        size = t.numel() * t.element_size()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # as safetensors pads it: the data starts 8-byte aligned
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, struct.pack("<Q", len(raw)) + raw)
        os.ftruncate(fd, 8 + len(raw) + offset)  # the data: a hole
    finally:
        os.close(fd)
