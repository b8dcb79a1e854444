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
