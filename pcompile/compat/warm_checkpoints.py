"""Checkpoints of virtual tensors: torch.save writes a placeholder file that torch.load reads back.

A warm's tensors are fakes: they have shapes, dtypes and devices but no data. A script that saves a
checkpoint and loads it again (a final eval on `best.pt`, Lightning's `ckpt_path="best"`, a resume)
needs a file that loads back with the same keys, shapes and dtypes; the values do not matter (they
are placeholders anyway) and must cost no disk: a 7B model's checkpoint must not write 14 GB.

The file is torch's own zip format, written by torch.save itself under torch's
`serialization.skip_data(materialize_fake_tensors=True)` (fakes pickle as ordinary tensors on their
device): the pickle, every real tensor's bytes (RNG states), and for each fake's storage an *empty*
record, plus a `pcompile_placeholders` record naming those storages. torch.load of such a file,
inside the warm, gives each placeholder storage uninitialized memory in place of the record
(`placeholder_reader`); warm_fakes.load turns the CUDA-bound ones into fakes and zeroes the others.

Private surface: `torch.serialization._open_zipfile_writer` / `_open_zipfile_reader` (replaced for
the length of one save, and wrapped for loads), `PyTorchFileWriter.write_record_metadata` (what
skip_data calls for each storage: here it becomes an empty record, or the real bytes), and the
pickler's `persistent_id` results ("storage", type, key, location, numel), read to map keys to storages.
"""
from __future__ import annotations

import json
import pickle
import threading
import types
from typing import Any

import torch

from pcompile.compat.warm_runtime import mark, marked, missing

CHECKED = {"torch": "2.11.0, 2.14.1, 2.15.0"}

PRIVATE_SYMBOLS: list[tuple[str, str]] = [
    ("torch.serialization", "_open_zipfile_writer"),
    ("torch.serialization", "_open_zipfile_reader"),
    ("torch.serialization", "skip_data"),
    ("torch._C.PyTorchFileWriter", "write_record_metadata"),
    ("torch._C.PyTorchFileReader", "get_storage_from_record"),  # -> a uint8 tensor on the record's bytes
    ("torch._C.PyTorchFileReader", "has_record"),
]

MARKER = "pcompile_placeholders"
_lock = threading.RLock()  # the writer swap is module-wide: one placeholder save at a time


def check() -> list[str]:
    return missing(PRIVATE_SYMBOLS)


class _Writer:
    """torch's zip writer, with skip_data's reserved records replaced: a fake's storage gets an empty
    record, a real one its bytes; the placeholder keys go into MARKER at the end."""

    def __init__(self, inner: Any, storages: dict[str, Any]) -> None:
        self._inner = inner
        self._storages = storages
        self._placeholders: list[str] = []

    def write_record_metadata(self, name: str, nbytes: int) -> Any:
        key = name.rpartition("/")[2]
        storage = self._storages.get(key)
        untyped = getattr(storage, "_untyped_storage", storage)
        if storage is None or getattr(storage, "_fake_device", None) is not None or getattr(untyped, "_pcompile_fake", False):
            self._placeholders.append(key)
            return self._inner.write_record(name, b"", 0)
        if untyped.device.type != "cpu":
            untyped = untyped.cpu()
        return self._inner.write_record(name, untyped, nbytes)

    def write_end_of_file(self) -> Any:
        data = json.dumps(self._placeholders).encode()
        self._inner.write_record(MARKER, data, len(data))
        return self._inner.write_end_of_file()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _recording(pickle_module: Any, storages: dict[str, Any]) -> Any:
    """`pickle_module` whose Pickler also records key -> storage from torch's persistent ids."""
    base = pickle_module.Pickler

    class Recording(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            inner = self.persistent_id  # torch's PyTorchPickler.persistent_id, bound

            def persistent_id(obj: Any) -> Any:
                pid = inner(obj)
                if isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage":
                    storages[pid[2]] = obj
                return pid

            self.persistent_id = persistent_id  # the instance's, read by the C pickler at init
            super().__init__(*args, **kwargs)

    module = types.SimpleNamespace(**{k: getattr(pickle_module, k) for k in dir(pickle_module) if not k.startswith("__")})
    module.__name__ = getattr(pickle_module, "__name__", "pickle")
    module.Pickler = Recording
    return module


def save_placeholders(save: Any, obj: Any, f: Any, pickle_module: Any = pickle, pickle_protocol: int = 2,
                      _use_new_zipfile_serialization: bool = True, _disable_byteorder_record: bool = False) -> bool:
    """torch.save (`save`, the original) of `obj` holding fakes, as a placeholder file. False where
    the legacy format was asked for (no skip_data there): the caller skips the save instead."""
    if not _use_new_zipfile_serialization:
        return False
    import torch.serialization as ser

    storages: dict[str, Any] = {}
    with _lock:
        original = ser._open_zipfile_writer

        def opener(name_or_buffer: Any) -> Any:
            ctx = original(name_or_buffer)
            ctx.file_like = _Writer(ctx.file_like, storages)
            return ctx

        ser._open_zipfile_writer = opener
        try:
            with ser.skip_data(materialize_fake_tensors=True):
                save(obj, f, pickle_module=_recording(pickle_module, storages), pickle_protocol=pickle_protocol,
                     _disable_byteorder_record=_disable_byteorder_record)
        finally:
            ser._open_zipfile_writer = original
    return True


_tls = threading.local()


class deferred_zeros:
    """Inside, placeholder storages are left uninitialized (untouched memory costs address space
    only): the caller makes fakes of the CUDA-bound ones and zeroes the rest (`zero_if_placeholder`)."""

    def __enter__(self) -> None:
        _tls.depth = getattr(_tls, "depth", 0) + 1

    def __exit__(self, *exc: Any) -> None:
        _tls.depth -= 1


def zero_if_placeholder(storage: Any) -> None:
    if is_placeholder(storage):
        getattr(storage, "_untyped_storage", storage).fill_(0)


class _Reader:
    """torch's zip reader of a placeholder file: each placeholder storage is fresh memory marked
    `_pcompile_placeholder` (zeros, or left for the caller inside `deferred_zeros`), instead of
    its empty record."""

    def __init__(self, inner: Any, keys: set[str]) -> None:
        self._inner = inner
        self._keys = keys

    def get_storage_from_record(self, name: str, nbytes: int, cls: Any) -> Any:
        if name.rpartition("/")[2] in self._keys and name.startswith("data/"):
            data = torch.empty(nbytes, dtype=torch.uint8)  # as the record's: a byte tensor on its storage
            data.untyped_storage()._pcompile_placeholder = True
            if not getattr(_tls, "depth", 0):
                data.zero_()
            return data
        return self._inner.get_storage_from_record(name, nbytes, cls)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def read_placeholders() -> None:
    """Every torch.load of a placeholder file reads it through `_Reader` (other files: unchanged)."""
    import torch.serialization as ser

    original = ser._open_zipfile_reader
    if marked(original, "read_placeholders"):
        return

    def opener(name_or_buffer: Any) -> Any:
        ctx = original(name_or_buffer)
        reader = ctx.file_like
        if reader.has_record(MARKER):
            ctx.file_like = _Reader(reader, set(json.loads(bytes(reader.get_record(MARKER)))))
        return ctx

    mark(opener, "read_placeholders")
    ser._open_zipfile_reader = opener


def is_placeholder(storage: Any) -> bool:
    return bool(getattr(getattr(storage, "_untyped_storage", storage), "_pcompile_placeholder", False))
