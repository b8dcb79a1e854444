"""pcompile: compile each torch.compile kernel and graph once for the whole cluster."""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "cache_lookups", "install", "warming"]


def install() -> bool:
    """Route the default inductor backend of this process through pcompile; False (warned once)
    if it runs stock. The hooks turn on at the first torch.compile call."""
    from pcompile.inductor.install import install as _install

    return _install()


def warming() -> bool:
    """True inside `pcompile warm`: a script can skip work that cannot run on fake tensors."""
    from pcompile.settings import WARMING

    return bool(WARMING.get())


def cache_lookups() -> tuple[int, int]:
    """(hits, look-ups) of this process's cache look-ups so far, every layer; (0, 0) if pcompile
    looked nothing up (it is off, or stepped aside). A script can say whether a rerun would help."""
    from pcompile.store import compose, hits

    st = compose.opened_store()
    if st is None:
        return 0, 0
    with st.stats._lock:
        layers = {name: dict(c) for name, c in st.stats.data["layers"].items()}
    return hits.totals(hits.table(layers))
