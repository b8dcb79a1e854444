"""Why two keys differ: a field-by-field diff of the inputs stored beside each key."""
from __future__ import annotations

import dataclasses

from pcompile.keys.key import KeyInputs


@dataclasses.dataclass(frozen=True)
class Difference:
    field: str
    a: str | None
    b: str | None


def diff_inputs(a: KeyInputs, b: KeyInputs) -> list[Difference]:
    out: list[Difference] = []
    if a.layer != b.layer:
        out.append(Difference("layer", a.layer, b.layer))
    if a.source_hash != b.source_hash:
        out.append(Difference("source_hash", a.source_hash, b.source_hash))
    for name in sorted(set(a.fingerprint) | set(b.fingerprint)):
        va, vb = a.fingerprint.get(name), b.fingerprint.get(name)
        if va != vb:
            out.append(Difference(f"fingerprint.{name}", va, vb))
    return out
