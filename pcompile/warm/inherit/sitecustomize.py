"""Put on the PYTHONPATH of a warm child using the Python redirect (pcompile/warm/isolation.py), so
every Python process it starts (multiprocessing spawn/forkserver workers, subprocess children)
installs the same redirect before running anything; then the next sitecustomize on sys.path runs."""
import importlib.util
import os
import sys


def _install() -> None:
    try:
        from pcompile import settings
    except ImportError:
        return
    state = settings.WARM_REDIRECT.raw()
    if not state or not os.path.isfile(state):  # the warm child itself writes it once its own redirect is in
        return
    try:
        from pcompile.warm import paths

        paths.install_from(state)
    except Exception as exc:  # a child that cannot be redirected says so, loudly
        print(f"pcompile warm: this child process ({sys.argv[:2]}) could not install the file redirect: "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if entry and os.path.abspath(entry) != here:
            cand = os.path.join(entry, "sitecustomize.py")
            if os.path.isfile(cand):
                spec = importlib.util.spec_from_file_location("_pcompile_next_sitecustomize", cand)
                if spec and spec.loader:
                    spec.loader.exec_module(importlib.util.module_from_spec(spec))
                return


_install()
_chain()
