"""What a script gets when it reads a value back from the virtual GPU during warm.

The warm runs the script's CPU code for real; only CUDA tensors are virtual (fakes, no values).
Reading one back -- `.item()`, `float()`, `int()`, `bool()`, `.tolist()`, `.cpu()`, a copy into a
CPU tensor, `print(t)`/`str(t)`, an op whose output depends on values -- behaves as if **the virtual GPU's memory held
zeros**: `.item()` is 0.0 / 0 / False by dtype, `.cpu()` is a real CPU tensor of zeros with the
right shape, dtype and strides, `nonzero()` is empty. Zero, not NaN: scripts stop on non-finite
losses (`if not math.isfinite(loss)`), and zero keeps every format, comparison and running sum
valid, so logging, eval bookkeeping, best-checkpoint logic and early stopping run unchanged.

Except where the warm knows the values: a tensor made from the script's own host data (labels,
masks, indices copied to the GPU) and what cheap ops compute from it read as their real values
(compat/warm_values.py), so `if valid.sum().item() == 0:` takes the GPU job's path; those reads
are not counted.

Each read is counted by the script line that made it and listed at the end of the warm: a branch
taken on a placeholder may differ from the GPU job's, and that line is where to look if a graph
the GPU job compiles was not warmed.
"""
from __future__ import annotations

import linecache
import os
import sys
import threading
from collections import Counter
from typing import Any

import torch

from pcompile.compat.warm_fakes import device_repr, zeros_like_on_cpu  # the fakes need it too, a floor below

def _dir_of(module: Any) -> str:
    return os.path.dirname(os.path.realpath(module.__file__)) + os.sep


_STDLIB = _dir_of(os)
_INTERNALS = tuple({_dir_of(torch), os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep})  # torch, pcompile
_SITE_MARKERS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)
_SCRIPT: str | None = None
_lock = threading.Lock()
_reads: Counter[tuple[str, int, str, str]] = Counter()


def set_script(path: str) -> None:
    global _SCRIPT
    _SCRIPT = os.path.realpath(path)


def _internal(real: str) -> bool:
    """pcompile's, torch's (and Triton's) own frames, and the standard library's: never the line
    to look at. A library's (site-packages: ultralytics, transformers) is: it made the read."""
    if real.startswith(_INTERNALS) or (os.sep + "triton" + os.sep) in real:
        return True
    return real.startswith(_STDLIB) and not any(m in real for m in _SITE_MARKERS)


def user_site() -> tuple[str, int, str]:
    """(file, line, source) of the innermost frame in user or library code: the line that made the
    read, not the script's outermost one (`bin/yolo: sys.exit(entrypoint())`)."""
    frame = sys._getframe(1)
    while frame is not None:
        fname = frame.f_code.co_filename
        if not fname.startswith("<") and not _internal(os.path.realpath(fname)):
            return fname, frame.f_lineno, linecache.getline(fname, frame.f_lineno).strip()
        frame = frame.f_back
    return ("<library>", 0, "")


def record(how: str) -> None:
    """Count one read of a virtual value at the user's line."""
    fname, line, src = user_site()
    with _lock:
        _reads[(fname, line, src, how)] += 1


def summary(limit: int = 20) -> dict[str, Any]:
    """Reads for the warm report: the total and the busiest lines."""
    with _lock:
        items = _reads.most_common()
    by_line: Counter[tuple[str, int, str]] = Counter()
    hows: dict[tuple[str, int, str], set[str]] = {}
    for (fname, line, src, how), n in items:
        by_line[(fname, line, src)] += n
        hows.setdefault((fname, line, src), set()).add(how)
    lines = [{"file": f, "line": ln, "source": s, "count": n, "how": sorted(hows[(f, ln, s)])}
             for (f, ln, s), n in by_line.most_common(limit)]
    return {"total": sum(by_line.values()), "sites": len(by_line), "lines": lines}


def scalar(dtype: torch.dtype) -> bool | int | float | complex:
    """The placeholder Python value of one element of `dtype`."""
    if dtype == torch.bool:
        return False
    if dtype.is_complex:
        return 0j
    if dtype.is_floating_point:
        return 0.0
    return 0


def _one_element(t: torch.Tensor, what: str) -> None:
    if t.numel() != 1:
        if what == "__bool__":
            raise RuntimeError(f"Boolean value of Tensor with more than one value is ambiguous")
        raise RuntimeError(f"a Tensor with {t.numel()} elements cannot be converted to Scalar")


def read_fake(tensor: torch.Tensor, how: str) -> Any:
    """Stand-in for a value read of a virtual tensor (see the module docstring); counted."""
    if how == "numpy" and tensor.device.type != "cpu":
        raise TypeError(f"can't convert {tensor.device} device type tensor to numpy. "
                        "Use Tensor.cpu() to copy the tensor to host memory first.")
    from pcompile.compat.warm_values import value_of

    real = value_of(tensor)
    if how == "__repr__":  # print(t), str(t), f"{t}": torch's repr of the GPU tensor, with its values
        if real is None and tensor.numel():
            record("print/repr")
        # zeros as one expanded element: torch prints only the edges of a large tensor, so
        # printing a 10 GB activation must not allocate 10 GB of host zeros
        zeros = torch.zeros((), dtype=tensor.dtype).expand(tuple(tensor.shape))
        return device_repr(tensor, real if real is not None else zeros)
    if real is not None:  # made from the script's own host data: its real values, not counted
        return getattr(real, how)()
    record(how)
    if how in ("item", "__float__", "__int__", "__index__", "__bool__", "__complex__"):
        _one_element(tensor, how)
        value = scalar(tensor.dtype)
        conv = {"__float__": float, "__int__": int, "__index__": int, "__bool__": bool, "__complex__": complex}.get(how)
        return conv(value) if conv else value
    if how == "tolist":
        return zeros_like_on_cpu(tensor).tolist()
    if how == "numpy":
        return zeros_like_on_cpu(tensor).numpy()
    raise AssertionError(f"unexpected read {how}")
