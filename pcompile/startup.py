"""What `PCOMPILE=1` does at interpreter start, before the script's own `import torch`.

Why: `import torch` itself is the first big import of every job. Where Python keeps no bytecode
for torch (`PYTHONDONTWRITEBYTECODE=1`, as many container images set), each process compiles
torch from source (H200 image: 3.7-4.9 s, against 1.6 s from bytecode). The autoload
(inductor/autoload.py) runs at the end of `import torch`, too late for torch's own modules, so
pcompile's wheel also installs `pcompile-startup.pth`, which Python's `site` runs at start-up
and which calls `run` only when `PCOMPILE` is set. Everything here must be cheap and must never
raise: a broken start-up hook would break every Python process of the environment.
"""
from __future__ import annotations

#: the file in site-packages (the repository root's copy is the one shipped); its one line asks for
#: `run` only when PCOMPILE is set to a true value, so every other Python process pays one dict look-up
PTH_NAME = "pcompile-startup.pth"


def run() -> None:
    """Point Python's bytecode prefix at pcompile's cache dir (`PCOMPILE_BYTECODE`'s rules) before
    any of torch is imported. Nothing else: the hooks still wait for torch (the autoload)."""
    try:
        from pcompile.settings import ROUTE, WARMING

        if not ROUTE.get() or WARMING.get():
            return  # the warm child keeps its own prefix (warm/child.py)
        from pcompile.inductor import bytecode

        bytecode.enable_from_env()
    except Exception:  # an invalid setting is refused later, where the job can say so
        pass
