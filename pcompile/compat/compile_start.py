"""Run something when Dynamo starts compiling the first frame, not when `torch.compile` is called.

Why: a script may call `torch.compile(model)` and never run the compiled module (nanoGPT's
sample.py with --compile=True calls `model.generate`, which never enters the compiled forward).
Starting the compile pool at the `torch.compile` call made such a job 1.1-1.8 s slower on the
H100/H200 than stock (the daemon's workers load every core while the script runs); at the first
frame it still overlaps Dynamo's tracing, which is what it is for.

Touched (torch 2.11.0 and 2.14.1, identical: `torch/_dynamo/callback.py`):
  torch._dynamo.callback.callback_handler.register_start_callback, run by
  `install_callbacks` around each frame compile (convert_frame.compile_inner) when no other
  compile is in flight.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

from pcompile.compat import require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1'}
PRIVATE = ("torch._dynamo.callback.callback_handler.register_start_callback",)


def check() -> None:
    import torch._dynamo.callback as cb

    handler = require_attr(cb, "callback_handler", "torch._dynamo.callback")
    require_attr(handler, "register_start_callback", "torch._dynamo.callback.callback_handler")


def on_first_frame(fn: Callable[[], Any]) -> None:
    """Call `fn()` once, at the start of the first frame compile after this call (never raises
    into Dynamo: a failing `fn` is simply done)."""
    import torch._dynamo.callback as cb

    lock, done = threading.Lock(), [False]

    def start(_args: Any = None) -> None:
        with lock:
            if done[0]:
                return
            done[0] = True
        try:
            fn()
        except Exception:
            pass

    cb.callback_handler.register_start_callback(start)
