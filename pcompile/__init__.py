"""pcompile: compile each torch.compile kernel and graph once for the whole cluster."""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "install", "warming"]


def install() -> bool:
    """Route the default inductor backend of this process through pcompile; False (warned once)
    if it runs stock. The hooks turn on at the first torch.compile call."""
    from pcompile.inductor.install import install as _install

    return _install()


def warming() -> bool:
    """True inside `pcompile warm`: a script can skip work that cannot run on fake tensors."""
    from pcompile.settings import WARMING

    return bool(WARMING.get())
