"""How a setting's text becomes a value: one parser per type, for the registry (settings.py).

`parse()` raises ValueError("is not ...") for text it cannot use; the registry turns that into its
one line on stderr and the default. `show()` writes a value as messages and the README's table
read it. Sizes take binary suffixes everywhere (`20G`, `512M`, `1.5GiB`): `parse_size` is also
what the CLI's size flags use.

Ground floor: imports nothing from pcompile.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
from typing import Any, ClassVar



@dataclasses.dataclass(frozen=True)
class Kind:
    """How a variable's text becomes a value, and how a value reads in messages and the README."""

    what: ClassVar[str] = "text"  # "a size (like 20G)": completes "PCOMPILE_X='abc' is not ..."

    def parse(self, raw: str) -> Any:
        return raw

    def show(self, value: Any) -> str:
        return str(value)


_ON = {"1", "true", "yes", "on"}
_OFF = {"0", "false", "no", "off"}


@dataclasses.dataclass(frozen=True)
class Bool(Kind):
    what: ClassVar[str] = "on or off (1/0, true/false, yes/no, on/off)"

    def parse(self, raw: str) -> bool:
        low = raw.strip().lower()
        if low in _ON:
            return True
        if low in _OFF:
            return False
        raise ValueError(f"is not {self.what}")

    def show(self, value: Any) -> str:
        return "1" if value else "0"


@dataclasses.dataclass(frozen=True)
class Bounded(Kind):
    """A numeric kind with optional bounds; `_value` turns text into a number or raises."""

    minimum: float | None = None
    maximum: float | None = None

    def parse(self, raw: str) -> Any:
        value = self._value(raw)
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"is below the minimum {self.show(self.minimum)}")
        if self.maximum is not None and value > self.maximum:
            raise ValueError(f"is above the maximum {self.show(self.maximum)}")
        return value

    def _value(self, raw: str) -> Any:
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class Float(Bounded):
    what: ClassVar[str] = "a number"

    def _value(self, raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or not self._fits(value):
            raise ValueError(f"is not {self.what}")
        return value

    def _fits(self, value: float) -> bool:
        return True

    def show(self, value: Any) -> str:
        return f"{value:g}"


@dataclasses.dataclass(frozen=True)
class Int(Float):
    """Whole numbers; `1e6` is accepted, `1.5` is not."""

    what: ClassVar[str] = "an integer"

    def _value(self, raw: str) -> int:  # type: ignore[override]
        return int(super()._value(raw))

    def _fits(self, value: float) -> bool:
        return value == int(value)

    def show(self, value: Any) -> str:
        return str(value)


_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)(?:e(\d+))?\s*([kmgtp]?)(i?b)?\s*")


def parse_size(text: str) -> int:
    """Bytes from `20G`, `512M`, `1.5GiB`, `4096`, `64KB` (binary units); ValueError otherwise."""
    match = _SIZE.fullmatch(text.lower())
    if not match or (match.group(4) == "ib" and not match.group(3)):
        raise ValueError(f"{text!r} is not a size (like 20G, 512M or 1.5GiB)")
    number, exponent, unit = match.group(1), match.group(2), match.group(3)
    value = float(number) * (10 ** int(exponent) if exponent else 1)
    return int(value * _SIZE_UNITS[unit])


def format_size(nbytes: float) -> str:
    """A short exact binary-unit spelling: 10737418240 -> `10G`, 1.5 GiB -> `1.5G`."""
    for unit in ("P", "T", "G", "M", "K"):
        scale = _SIZE_UNITS[unit.lower()]
        if nbytes >= scale and (nbytes * 10) % scale == 0:
            return f"{nbytes / scale:g}{unit}"
    return str(int(nbytes))


@dataclasses.dataclass(frozen=True)
class Size(Bounded):
    what: ClassVar[str] = "a size (like 20G)"

    def _value(self, raw: str) -> int:
        try:
            return parse_size(raw)
        except ValueError:
            raise ValueError(f"is not {self.what}") from None

    def show(self, value: Any) -> str:
        return format_size(value)


_DURATION_UNITS = {"": 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|min|m|h|d)?\s*")


@dataclasses.dataclass(frozen=True)
class Duration(Bounded):
    """Seconds: `30`, `30s`, `500ms`, `2m`, `1h`, `1d`."""

    what: ClassVar[str] = "a duration (seconds, or like 30s, 2m, 1h)"

    def _value(self, raw: str) -> float:
        match = _DURATION.fullmatch(raw.lower())
        if not match:
            raise ValueError(f"is not {self.what}")
        return float(match.group(1)) * _DURATION_UNITS[match.group(2) or ""]

    def show(self, value: Any) -> str:
        return f"{value:g} s"


@dataclasses.dataclass(frozen=True)
class Choice(Kind):
    """One of `values` (case-insensitive); `aliases` maps other spellings to a value; text that
    starts with one of `prefixes` (like `ray://`) is taken as it is."""

    values: tuple[str, ...] = ()
    aliases: tuple[tuple[str, str], ...] = ()
    prefixes: tuple[str, ...] = ()
    spelled: str = ""  # how the message lists the choices, when not just `values`

    def parse(self, raw: str) -> str:
        text = raw.strip()
        if any(text.startswith(p) for p in self.prefixes):
            return text
        low = text.lower()
        if low in self.values:
            return low
        for alias, value in self.aliases:
            if low == alias:
                return value
        raise ValueError(f"is not {self.spelled or 'one of ' + ', '.join(self.values)}")


@dataclasses.dataclass(frozen=True)
class FilePath(Kind):
    """`output`: pcompile writes there ("dir" or "file"), so a warm's file sandbox keeps it real."""

    what: ClassVar[str] = "a path"
    output: str | None = None

    def parse(self, raw: str) -> str:
        return os.path.expanduser(raw.strip())


@dataclasses.dataclass(frozen=True)
class Text(Kind):
    """Taken as it is (secrets keep their spaces); empty counts as unset."""

    what: ClassVar[str] = "text"
