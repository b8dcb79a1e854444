"""Storage identity and copies of the warm's fake CUDA tensors: addresses, clones, `copy.deepcopy`.

A fake tensor has a meta storage and no memory, so every one reported `data_ptr() == 0`: distinct
weights looked like one shared storage (safetensors refuses to save "shared tensors", transformers'
tie detection compares storage pointers and extents). `unique_addresses` gives each storage of the
script's fakes a distinct, stable, non-zero, 512-aligned address on first ask, taken from address
space the virtual device reserves (vvmm.c, never mapped, never handed out twice; a counter when the
device is not loaded), and views report their base's address plus their offset, as on a GPU.

`copy.deepcopy` of a fake went through torch's generic path, which deep-copies the tensor's
`__dict__`: its FakeTensorMode with every cache in it. The mode's converter keys constants (small
tensors made from host data) by `StorageWeakRef`, and a deep copy of a StorageWeakRef duplicates
the raw weak reference it frees in `__del__`: the storage's weak count is released twice, which
corrupts the heap ("corrupted double-linked list", a segfault, or torch's `use_count() == 1`
assert), and for those small tensors it also tried to copy the real constant through a fake op.
`deepcopy_within_the_mode` copies a fake as a GPU copy would: new storage of the same size (shared
among copies of views of one storage, via the memo), same offset/shape/strides, same requires_grad,
the gradient and user attributes deep-copied, the mode shared, the real constant copied.
`shared_weak_refs` makes any other deep copy of a StorageWeakRef share it (a weak reference to the
same storage is immutable), which removes the double release for every container of one.

Part of the warm's private-torch surface (see warm_runtime.py); tests/test_warm_compat.py runs
this module's check().
"""
from __future__ import annotations

import copy
import ctypes
import threading
from typing import Any, Callable

import torch

from pcompile.compat.warm_runtime import mark, marked, missing, untraced

CHECKED = {"torch": "2.11.0, 2.14.1, 2.15.0"}

PRIVATE_SYMBOLS: list[tuple[str, str]] = [
    ("torch._subclasses.fake_tensor", "FakeTensor"),
    ("torch._subclasses.fake_tensor", "unset_fake_temporarily"),
    ("torch._C", "StorageBase"),
]

#: CUDA's caching allocator aligns blocks to 512 bytes; fake addresses keep that alignment
ALIGN = 512
_route: list[Callable[[Any], bool]] = []
_lock = threading.Lock()
_vdev_address: list[Any] = []
_next = [1 << 46]  # without the device: a bump counter from 64 TiB up
_buffer_mode: list[Any] = [None]


def check() -> list[str]:
    """Names of the private symbols this module needs that this torch lacks (empty when all is well)."""
    gone = missing(PRIVATE_SYMBOLS)
    from torch.multiprocessing.reductions import StorageWeakRef

    if not hasattr(StorageWeakRef(torch.empty(1).untyped_storage()), "cdata"):
        gone.append("torch.multiprocessing.reductions.StorageWeakRef().cdata")
    return gone


def _new_address(nbytes: int, device: int) -> int:
    """A fresh address for `nbytes` on CUDA device `device`: from the virtual device's reserved
    space when it is loaded, which it then reports as that device's memory (cuPointerGetAttribute,
    what Triton's launcher asks of every pointer argument)."""
    if not _vdev_address:
        try:
            fn = ctypes.CDLL("libcuda.so.1").pcompile_vdev_fake_address_on
            fn.restype, fn.argtypes = ctypes.c_ulonglong, [ctypes.c_size_t, ctypes.c_int]
        except (OSError, AttributeError):  # no virtual device here (unit tests): a process-local counter
            fn = None
        _vdev_address.append(fn)
    fn = _vdev_address[0]
    size = max(ALIGN, -(-int(nbytes) // ALIGN) * ALIGN)
    if fn is not None:
        addr = int(fn(size, device))
        if addr:
            return addr
    with _lock:  # never reused
        start = _next[0]
        _next[0] += size
        return start


def storage_address(storage: Any) -> int:
    """The address of a fake's storage: assigned on first ask, stable while it lives and keeps its
    size (a storage that grows gets a new one, as a reallocation would)."""
    nbytes = storage.nbytes()
    held = getattr(storage, "_pcompile_addr", None)
    if held is None or nbytes > held[1]:
        held = (_new_address(nbytes, getattr(storage, "_pcompile_device", 0)), nbytes)
        storage._pcompile_addr = held
    return held[0]


def unique_addresses(owned: Callable[[Any], bool]) -> None:
    """Give the storages of fakes with `owned(t)` true (the script's own) distinct addresses; Dynamo's
    and Inductor's fakes keep stock behaviour. A later call replaces the predicate."""
    from torch._subclasses.fake_tensor import FakeTensor

    _route[:] = [owned]
    if marked(FakeTensor.data_ptr, "unique_addresses"):
        return
    original_storage = FakeTensor.untyped_storage
    original_storage_ptr = torch.UntypedStorage.data_ptr

    def untyped_storage(self: Any) -> Any:
        s = original_storage(self)
        if _route[0](self):
            s._pcompile_fake = True  # the Python storage object lives as long as the storage
            s._pcompile_device = self.device.index or 0
        return s

    def storage_data_ptr(self: Any) -> int:
        if getattr(self, "_pcompile_fake", False):
            return storage_address(self)
        return original_storage_ptr(self)

    def data_ptr(self: Any) -> int:
        if not _route[0](self):
            return torch.Tensor.data_ptr(self)
        return storage_address(untyped_storage(self)) + self.storage_offset() * self.element_size()

    for fn, name in ((untyped_storage, "untyped_storage"), (data_ptr, "data_ptr")):
        fn.__name__ = name
        mark(fn, "unique_addresses")
        setattr(FakeTensor, name, untraced(fn))
    storage_data_ptr.__name__ = "data_ptr"
    torch.UntypedStorage.data_ptr = untraced(storage_data_ptr)


def shared_weak_refs() -> None:
    """copy.deepcopy of a StorageWeakRef returns the same reference (see the module docstring)."""
    from torch.multiprocessing.reductions import StorageWeakRef

    StorageWeakRef.__deepcopy__ = lambda self, memo: self  # type: ignore[method-assign]


def deepcopy_within_the_mode(owned: Callable[[Any], bool]) -> None:
    """copy.deepcopy of the script's fakes (an EMA copy, a frozen reference model) gives fakes with
    their own storage, as a GPU copy would, and never copies the fake mode."""
    from torch._subclasses.fake_tensor import FakeTensor

    shared_weak_refs()
    _route[:] = [owned]
    original = FakeTensor.__deepcopy__
    if marked(original, "deepcopy_within_the_mode"):
        return

    def __deepcopy__(self: Any, memo: dict[Any, Any]) -> Any:
        if not _route[0](self) or not self.is_leaf:  # torch's own path (and its message for non-leaves)
            return original(self, memo)
        if id(self) in memo:
            return memo[id(self)]
        new = _copy_fake(self, memo)
        memo[id(self)] = new
        return new

    mark(__deepcopy__, "deepcopy_within_the_mode")
    FakeTensor.__deepcopy__ = untraced(__deepcopy__)


def share_mode(mode: Any) -> None:
    """A fake mode is process state, like the device: a deep copy of anything holding it shares it."""
    type(mode).__deepcopy__ = lambda self, memo: self


def _copy_fake(t: Any, memo: dict[Any, Any]) -> Any:
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    storage = t.untyped_storage()
    key = ("pcompile-fake-storage", storage._cdata)
    held = memo.get(key)
    with torch.no_grad():
        if held is None:
            # the memo keeps the source storage alive, so its id cannot be reused during this copy
            held = (storage, t.new_empty((storage.nbytes(),), dtype=torch.uint8))
            memo[key] = held
        new = t.new_empty((0,), dtype=t.dtype).set_(held[1].untyped_storage(), t.storage_offset(), t.size(), t.stride())
    new.requires_grad_(t.requires_grad)
    if t.grad is not None:
        new.grad = copy.deepcopy(t.grad, memo)
    # FakeTensor's own fields are the mode's bookkeeping (set on `new` already); anything else on
    # the tensor is user state and is deep-copied like torch does
    for k, v in t.__dict__.items():
        if k not in new.__dict__:
            new.__dict__[k] = copy.deepcopy(v, memo)
    constant = getattr(t, "constant", None)
    if constant is not None:  # a real tensor with the host data it came from: copy it outside the mode
        with unset_fake_temporarily():
            new.constant = torch.empty_like(constant).copy_(constant)
    return new


def host_storage_from_buffers(mode: Any) -> None:
    """`UntypedStorage.from_buffer` makes a *meta* storage while a fake mode is active (torch's
    choice for tracing), and the script runs under `mode` throughout: a host storage built from
    bytes came out with no data, and the tensor made on it failed ("set the storage of a tensor on
    device cpu to a storage on different device meta"). torch.distributed's object collectives
    build theirs this way (`broadcast_object_list`, `all_gather_object`, ...: Lightning's DDP
    broadcasts its log dir), and so does `torch.frombuffer`'s storage path. Under the script's own
    mode a buffer is host data: read it with the mode set aside, as on a GPU host."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from pcompile.compat.warm_fakes import active_fake_mode

    _buffer_mode[:] = [mode]  # a later install (another mode) takes over
    current = torch.UntypedStorage.__dict__.get("from_buffer")
    if current is not None and marked(current.__func__, "host_storage_from_buffers"):
        return
    base = torch._C.StorageBase.__dict__["from_buffer"]  # a C classmethod: bind it to the caller's class

    def from_buffer(cls: Any, *args: Any, **kwargs: Any) -> Any:
        if active_fake_mode() is not _buffer_mode[0]:
            return base.__get__(None, cls)(*args, **kwargs)
        with unset_fake_temporarily():
            return base.__get__(None, cls)(*args, **kwargs)

    mark(from_buffer, "host_storage_from_buffers")
    torch.UntypedStorage.from_buffer = classmethod(untraced(from_buffer))


def install(mode: Any) -> None:
    """Everything above for the script's fakes (those of `mode`), as the warm child runs them."""
    def owned(t: Any) -> bool:
        return getattr(t, "fake_mode", None) is mode

    unique_addresses(owned)
    deepcopy_within_the_mode(owned)
    share_mode(mode)
    host_storage_from_buffers(mode)
