"""`PCOMPILE=1`: pcompile for an unchanged script, through torch's plugin autoload.

At the end of `import torch`, torch calls every entry point of the group `torch.backends`
(`_import_device_backends`, torch >= 2.5, on unless TORCH_DEVICE_BACKEND_AUTOLOAD=0). pcompile
registers `autoload` there. It works the same for `pip install -e .` and `pip install .`
(it is package metadata, not a file dropped into site-packages) and costs nothing unless
PCOMPILE=1. torch is still initialising at that point, so this only sets environment
variables and wraps torch.compile's inductor wrapper; the hooks themselves (which import
Inductor) are installed by the first compile. It must never raise: torch would refuse to import.
"""
from __future__ import annotations

import os
import sys
import warnings

from pcompile.settings import DISABLE, ROUTE, WARMING


def requested() -> bool:
    return bool(ROUTE.get())


def autoload() -> None:
    """Entry point `torch.backends: pcompile`."""
    if WARMING.get():
        _read_warm_checkpoints()
    if not requested():
        return
    try:
        from pcompile.compat import gate
        from pcompile.inductor import env

        if not gate.supported():
            return  # warned once: this torch/triton runs stock Inductor
        problem = env.unusable_cache_dir()
        if problem is not None:
            print(problem, file=sys.stderr, flush=True)
            os.environ[DISABLE.name] = "1"  # hooks and compile workers run stock from here on
            return
        env.set_cache_dirs()
        from pcompile.inductor import bytecode

        bytecode.enable_from_env()  # before torch._dynamo's import, the first compile's
        from pcompile.inductor.install import route_default_backend

        route_default_backend()
    except Exception as exc:  # never break `import torch`
        warnings.warn(f"pcompile: PCOMPILE=1 could not hook torch.compile ({type(exc).__name__}: {exc}); "
                      "running stock Inductor", RuntimeWarning, stacklevel=2)


def _read_warm_checkpoints() -> None:
    """A process the warmed script started (an eval or export step run as `python eval.py ckpt`)
    inherits PCOMPILE_WARMING: the checkpoints it loads were saved during the warm as placeholders
    (compat/warm_checkpoints.py), which only pcompile's reader turns into zeros of the right shapes."""
    try:
        from pcompile.compat import warm_checkpoints

        if not warm_checkpoints.check():
            warm_checkpoints.read_placeholders()
    except Exception:  # never break `import torch`: the load then fails as it would without pcompile
        pass
