"""A program's growth cap: at most Dynamo's `recompile_limit` guarded entries per code, the newest.

Why: a loaded entry whose guards fail on every restart (a global constant that changes per run) is
followed by a new trace, and the program, saved with both, grew by one entry per restart without
end (each restart also checked every stale guard first). Dynamo itself keeps no more than
`recompile_limit` entries for one code within a process.

Touched (torch 2.11.0 and 2.14.1): `_dynamo/config.py` recompile_limit; `_dynamo/package.py`
_DynamoCodeCacheEntry (guarded_codes, appended to by add_guarded_code; backend_ids),
_GuardedCodeCacheEntry.dynamo_code, SerializedCode.co_names (a guarded code's bytecode names the
compiled graphs it calls: `__compiled_fn_...`, its backend ids).
"""
from __future__ import annotations

from typing import Any

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {"torch": "2.11.0, 2.14.1, 2.15.0"}


def check() -> None:
    import torch._dynamo.config as dconfig
    from torch._dynamo import package

    require_attr(dconfig, "recompile_limit", "torch._dynamo.config")
    for owner, fields in ((package._DynamoCodeCacheEntry, ("guarded_codes", "backend_ids")),
                          (package._GuardedCodeCacheEntry, ("dynamo_code",)), (package.SerializedCode, ("co_names",))):
        have = getattr(owner, "__dataclass_fields__", {})
        for name in fields:
            if name not in have:
                raise CompatError(f"torch._dynamo.package.{owner.__name__} has no field {name!r}")


def newest(code: Any) -> Any:
    """`code` (a _DynamoCodeCacheEntry copy) with its newest `recompile_limit` guarded entries. Backend
    ids of dropped entries are dropped too where each id is named by some entry's bytecode (else all
    are kept: the program is larger, never missing a graph)."""
    import torch._dynamo.config as dconfig

    limit = max(1, int(getattr(dconfig, "recompile_limit", 8)))
    guarded = list(getattr(code, "guarded_codes", ()) or ())
    if len(guarded) <= limit:
        return code
    kept = guarded[-limit:]

    def names(entries: list[Any]) -> set[str]:
        return {str(n) for e in entries for n in (getattr(e.dynamo_code, "co_names", ()) or ())}

    code.guarded_codes = kept
    ids = list(code.backend_ids)
    if {str(b) for b in ids} <= names(guarded):
        kept_names = names(kept)
        code.backend_ids = [b for b in ids if str(b) in kept_names]
    return code
