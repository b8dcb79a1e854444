"""Inductor's CPU vector-ISA probe through pcompile's store (layer kernel, inner look-ups).

Why: a node whose Inductor dir is empty (a fresh node of a shared cache, a new container) would
otherwise rebuild the probe's libraries with g++ before its first CPU graph, about 5 s on a 2-core
host, although every graph and kernel comes from the store (compat/cpu_isa_probe.py says what
the probe does). Two things are stored, each only after torch's own probe accepted it:

- `isa_probe`: the probe library, under torch's file name (its key hashes the probe source, the
  ISA flags and the compiler's and torch's versions) and pcompile's C++ fingerprint (the compiler's
  identity). It tells whether this compiler can build that ISA's code against this torch.
- `isa_probe_load`: that its dlopen probe passed, keyed also by the CPU model, flag set and C
  library (`versions.cpu_identity`); a host that differs in any of them runs the probe itself.

Neither decides which ISAs are tried: torch asks the CPU (cpuid) first and probes only the ISAs
it reports, so a stored result never lets torch pick an ISA this host cannot run. The look-ups
are inner (not a graph's or kernel's hit or miss; `pcompile stats` counts them apart) and the
publishes are not counted as compiles: the probe is torch's check of the host, not a compile of
the job's code.
"""
from __future__ import annotations

import os
from typing import Any

from pcompile.compat import cpu_isa_probe as compat
from pcompile.inductor import cpp_cache, store_gateway
from pcompile.settings import DISABLE

LIBRARY, LOAD_OK = "isa_probe", "isa_probe_load"
BLOB = "lib"


def _fetch(kind: str, name: str, path: str, mode: int) -> bool:
    """Put the stored copy of `name` at `path`; False on a miss."""
    entry = store_gateway.lookup(kind, name, single_flight=False, counted=False)
    data = entry.blobs.get(BLOB) if entry is not None else None
    return cpp_cache.materialise(path, data, mode)


def _publish(kind: str, name: str, path: str | None) -> None:
    """Store the file at `path` (None: the load check's mark) unless this node's store has it."""
    if store_gateway.present(kind, name):
        return
    data = b"ok"
    if path is not None:
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError:
            return
    if data:
        store_gateway.publish(kind, name, {BLOB: data}, meta={"source": "inductor.isa_probe", "file": name},
                              compiled=False)


def make_wrapper(original: compat.CheckBuild) -> compat.CheckBuild:
    def check_build(self: Any, code: str) -> bool:
        if DISABLE.get() or store_gateway.store() is None:
            return original(self, code)
        try:
            library = compat.probe_library(self, code)
        except Exception:
            return original(self, code)
        name = os.path.basename(library)
        marker = library + compat.LOAD_OK_SUFFIX
        if not os.path.isfile(library):
            _fetch(LIBRARY, name, library, 0o755)
        if os.path.isfile(library) and not os.path.isfile(marker):
            _fetch(LOAD_OK, name, marker, 0o644)
        ok = original(self, code)
        if ok:  # only what torch's own probe accepted on this host is shared
            _publish(LIBRARY, name, library)
            if os.path.isfile(marker):
                _publish(LOAD_OK, name, None)
        return ok

    check_build.__doc__ = "pcompile: the vector-ISA probe's libraries through the store (see pcompile.inductor.isa_probe_cache)"
    return check_build


def install() -> None:
    compat.install(make_wrapper)


def uninstall() -> None:
    compat.uninstall()
