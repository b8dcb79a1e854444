"""User-facing errors: each one prints as a single line naming the problem and the fix."""
from __future__ import annotations


class PcompileError(Exception):
    """An error the user can act on. The CLI prints it as one line and exits 2."""

    exit_code = 2


class BadKeyError(PcompileError):
    """A key that is not of the form LAYER-HEX32 (also blocks path traversal)."""


class StoreWriteError(PcompileError):
    """A publish that could not complete; the store is left as it was and the job goes on uncached."""


class CorruptEntryError(PcompileError):
    """An entry whose manifest or blobs fail verification; it is quarantined and treated as a miss."""

    #: False for refusals that say more about the reader than the entry (a wrong verify key):
    #: the entry is skipped, not moved aside, so a misconfigured reader cannot wipe a shared cache.
    quarantine = True


class PcompileFallbackWarning(UserWarning):
    """pcompile could not hook something (this torch/triton, a layer, the pool) and runs stock
    Inductor there instead; warned once per problem (pcompile/warn.py)."""


class UntrustedEntryError(CorruptEntryError):
    """An entry whose signature is missing, unknown or wrong: refused before any blob is read."""

    quarantine = False


class RemoteUnavailable(PcompileError):
    """The remote did not answer (or is being skipped). Reads treat it as a miss."""

    def __init__(self, message: str, *, skipped: bool = False) -> None:
        super().__init__(message)
        self.skipped = skipped


class CompatError(RuntimeError):
    """A private API pcompile relies on is missing or changed shape in this torch/triton."""
