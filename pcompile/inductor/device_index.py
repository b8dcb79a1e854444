"""One cache entry for every GPU of a node: keys as if on cuda:0, entries bound to the caller's GPU.

Ranks of a torchrun job compile the same graphs, each on `cuda:LOCAL_RANK`. Stock Inductor puts
that index into every key (example inputs' metadata; graph constants such as iota, full and
scalar_tensor print `device(type='cuda', index=h)`; each Triton kernel's source embeds
`DeviceProperties(index=h)`, and its autotune key is that source's hash), so rank h could never
use rank 0's entries, nor a warm's (which compiles as device 0).

Mechanism, chosen over the alternatives:
- Keys. A key computed for a graph whose CUDA tensors and code all live on one device cuda:h is
  computed as if h were 0 (compat/device_index.py maps torch.device objects and the graph's
  code in the hashing pickler). On cuda:0, and for graphs that span several devices, nothing
  changes: rank 0, a warm and stock Inductor keep computing exactly stock keys.
- Loads. An FX entry whose code was generated for cuda:i, loaded by a caller whose inputs are on
  cuda:j, has its wrapper rebound before it is imported: the device guard, set_device,
  get_raw_stream, torch.device literals and each kernel's DeviceProperties index i -> j (the
  module is written under the hash of the rebound source, the cudagraph device set and saved
  constants follow). Nothing else in the entry depends on the index, so the graph runs on cuda:j
  exactly as if compiled there: same kernels, same numerics. Code naming any device the patterns
  do not account for is refused (torch recompiles). Kernel results from the compile pool are
  keyed by their cuda:0 source and rebound to the requesting kernel's index (kernel_router.py).
- Compiles are untouched: each rank compiles on its own device, as stock does.

Alternatives measured or read, and why not:
- Compile on cuda:0 and retarget: on a real node rank h would then create a context (and
  benchmark kernels) on GPU 0, and its loaded code would still name device 0.
- torch's own compile-on-one-rank mode (`torch.compiler.config.compile_on_one_rank`, 2.14: the
  device resolved at run time, DeviceProperties(index=None)): absent in 2.11, which the GPU
  machine runs; it also changes the traced graphs (device-as-parameter), i.e. every key.
- Rewriting codegen to emit `torch.cuda.current_device()`: a patch in every codegen path
  (python and C++ wrappers, each kernel's meta), against one rewrite at the single load point.
Measured on the virtual device with two GPUs (tests/test_device_index.py): before, rank 1's FX and
AOTAutograd keys differed from rank 0's only by the index (graph constants and example-input
metadata); after, both ranks' keys are equal, rank 1 hits every entry rank 0 wrote, and its
loaded wrapper names only cuda:1.

`PCOMPILE_DEVICE_INDEX=keep` turns all of this off (stock keys: entries per GPU index).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

from pcompile.settings import DEVICE_INDEX

_tls = threading.local()
_lock = threading.Lock()
#: keys normalised / entries rebound / entries refused, for tests and `pcompile stats` readers
counts: dict[str, int] = {"normalised": 0, "rebound": 0, "refused": 0}


def enabled() -> bool:
    return DEVICE_INDEX.get() != "keep"


def _cuda_indices(values: Any) -> set[int]:
    import torch

    found: set[int] = set()
    for value in values or ():
        if isinstance(value, torch.Tensor) and value.device.type == "cuda":
            found.add(value.device.index if value.device.index is not None else _current())
    return found


def _current() -> int:
    import torch

    return torch.cuda.current_device()


def _cuda_ready() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_initialized()


def _graph_tensors(gm: Any) -> list[Any]:
    """Tensors a graph module holds: parameters, buffers and constant attributes."""
    import torch

    if not isinstance(gm, torch.nn.Module):
        return []
    held = [*gm.parameters(), *gm.buffers()]
    for module in gm.modules():
        held.extend(v for v in vars(module).values() if isinstance(v, torch.Tensor))
    return held


def home_for_key(gm: Any, example_inputs: Any) -> int | None:
    """The device h != 0 a key should be computed as cuda:0 for, or None to keep the key stock.

    Only graphs on exactly one CUDA device. That device must be the current one when the graph
    has no CUDA tensor input (the load then binds to the current device) or names an unindexed
    "cuda" (which tracing resolves to the current device). Never under the C++ wrapper.
    """
    from pcompile.compat import device_index as compat

    if compat.cpp_wrapper_on():
        return None

    inputs = _cuda_indices(example_inputs)
    named = compat.graph_devices(gm)
    found = inputs | _cuda_indices(_graph_tensors(gm)) | (named - {compat.CURRENT})
    if len(found) != 1:
        return None
    home = found.pop()
    if (not inputs or compat.CURRENT in named) and (not _cuda_ready() or home != _current()):
        return None
    return home or None


@contextlib.contextmanager
def key_scope(gm: Any, example_inputs: Any) -> Iterator[None]:
    """Around one FX graph or AOTAutograd key computation."""
    previous = getattr(_tls, "home", None)
    try:
        home = home_for_key(gm, example_inputs)
    except Exception:  # never fail a compile over key normalisation: the key stays stock
        home = None
    _tls.home = home
    try:
        if home is None:
            yield
        else:
            from pcompile.compat import device_index as compat

            note("normalised")
            with compat.mapped_graph(gm, home):
                yield
    finally:
        _tls.home = previous


def key_home() -> int | None:
    return getattr(_tls, "home", None)


@contextlib.contextmanager
def binding(example_inputs: Any) -> Iterator[None]:
    """Around one FX entry lookup: entries loaded in it bind to the device of these inputs."""
    previous = getattr(_tls, "bind", None)
    try:
        found = _cuda_indices(example_inputs)
        target = found.pop() if len(found) == 1 else (_current() if not found and _cuda_ready() else None)
    except Exception:
        target = None
    _tls.bind = target
    try:
        yield
    finally:
        _tls.bind = previous


def rebind_target() -> int | None:
    return getattr(_tls, "bind", None)


def note(event: str) -> None:
    with _lock:
        counts[event] = counts.get(event, 0) + 1


class _Policy:
    """The policy as the object compat/device_index.py calls back."""

    key_scope = staticmethod(key_scope)
    key_home = staticmethod(key_home)
    binding = staticmethod(binding)
    rebind_target = staticmethod(rebind_target)
    note = staticmethod(note)


def install() -> str | None:
    """Turn normalisation on in this process; None if on, else why not."""
    if not enabled():
        return f"{DEVICE_INDEX.name}=keep"
    from pcompile import compat

    reason = compat.check("device_index")
    if reason is not None:
        return reason
    from pcompile.compat import device_index

    device_index.install(_Policy())
    return None


def install_autotune_key() -> None:
    """The autotune half only (compile workers: they look autotune entries up, nothing else)."""
    if not enabled():
        return
    from pcompile import compat

    if compat.check("device_index") is None:
        from pcompile.compat import device_index

        device_index.install_autotune_key()


def kernel_key_source(source: str) -> str:
    """What a Triton kernel's store key hashes: its source as for cuda:0 (unless turned off)."""
    if not enabled():
        return source
    from pcompile.compat import device_index

    return device_index.canonical_kernel_source(source)


def bind_kernel(kernel: Any, index: int | None) -> None:
    """A compiled kernel from the store, bound to the device its requester compiles for."""
    if index is None or not enabled():
        return
    from pcompile.compat import device_index

    if device_index.rebind_autotuner(kernel, index):
        note("kernel_rebound")


def uninstall() -> None:
    from pcompile.compat import device_index

    device_index.uninstall()
