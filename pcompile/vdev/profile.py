"""Device profiles: a real board's properties, captured once on it, answered by the virtual device.

A profile is a small versioned JSON file (written by `pcompile profile`): the raw
`cudaDeviceProp` bytes, every `cudaDeviceGetAttribute` 1..255, driver/runtime versions, and the
software fingerprint (torch, triton, cuDNN, ptxas, triton backend hash) that must match between
the warm host and the GPU host. Built-in profiles live in pcompile/warm/profiles/, one per board,
and only boards captured on real hardware are shipped.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pcompile.errors import PcompileError

FORMAT = "pcompile-device-profile"
VERSION = 1
BUILTIN_DIR = Path(__file__).resolve().parent.parent / "warm" / "profiles"
# sizeof(cudaDeviceProp) in the CUDA 13 headers; the C library copies exactly this many bytes.
PROP_SIZE_CUDA13 = 1008

# (field, offset, struct format) in the CUDA 13.0 cudaDeviceProp layout, for display and checks.
PROP_FIELDS: list[tuple[str, int, str]] = [
    ("totalGlobalMem", 288, "Q"), ("sharedMemPerBlock", 296, "Q"), ("regsPerBlock", 304, "i"),
    ("warpSize", 308, "i"), ("maxThreadsPerBlock", 320, "i"), ("totalConstMem", 352, "Q"),
    ("major", 360, "i"), ("minor", 364, "i"), ("multiProcessorCount", 384, "i"),
    ("memoryBusWidth", 592, "i"), ("l2CacheSize", 596, "i"), ("persistingL2CacheMaxSize", 600, "i"),
    ("maxThreadsPerMultiProcessor", 604, "i"), ("sharedMemPerMultiprocessor", 624, "Q"),
    ("regsPerMultiprocessor", 632, "i"), ("isMultiGpuBoard", 640, "i"), ("sharedMemPerBlockOptin", 672, "Q"),
]
# Short names a user may pass to --target, mapped to built-in board files.
ALIASES = {"h100": "h100-sxm5-80gb", "h200": "h200-sxm-141gb", "sm_90": "h100-sxm5-80gb", "sm90": "h100-sxm5-80gb",
           "hopper": "h100-sxm5-80gb"}
#: The board a warm without --target is for (the first one shipped; the summary names it).
DEFAULT_BOARD = "h100-sxm5-80gb"


@dataclass(frozen=True)
class DeviceProfile:
    data: dict[str, Any]
    source: str

    @property
    def name(self) -> str:
        return str(self.data["name"])

    @property
    def board(self) -> str:
        return str(self.data.get("board", ""))

    @property
    def prop_bytes(self) -> bytes:
        return bytes.fromhex(self.data["cuda_device_prop"]["hex"])

    @property
    def attributes(self) -> dict[int, int]:
        return {int(k): int(v) for k, v in self.data["attributes"].items()}

    @property
    def arch(self) -> str:
        f = self.fields()
        return f"sm_{f['major']}{f['minor']}"

    @property
    def software(self) -> dict[str, Any]:
        return dict(self.data.get("software", {}))

    def fields(self) -> dict[str, Any]:
        """Decoded cudaDeviceProp fields (CUDA 13 layout)."""
        raw = self.prop_bytes
        out: dict[str, Any] = {"name": raw[:256].split(b"\0", 1)[0].decode(errors="replace")}
        for field, off, fmt in PROP_FIELDS:
            out[field] = struct.unpack_from("<" + fmt, raw, off)[0]
        return out

    def write_flat(self, path: Path) -> Path:
        """The line format vcuda.c reads (no JSON parser in C)."""
        lines = [f"name {self.name}", f"prop {self.prop_bytes.hex()}"]
        lines += [f"attr {k} {v}" for k, v in sorted(self.attributes.items())]
        lines.append(f"driver_version {int(self.data.get('driver_version', 13000))}")
        lines.append(f"runtime_version {int(self.data.get('runtime_version', 13000))}")
        if self.data.get("driver_release"):  # nvidia-smi's "Driver Version" (smi.py); vcuda.c skips it
            lines.append(f"driver_release {self.data['driver_release']}")
        path.write_text("\n".join(lines) + "\n")
        return path


def validate(data: dict[str, Any], source: str) -> DeviceProfile:
    if data.get("format") != FORMAT:
        raise PcompileError(f"{source} is not a pcompile device profile; capture one with `pcompile profile --out FILE` on the GPU host")
    if int(data.get("version", 0)) > VERSION:
        raise PcompileError(f"{source} is profile version {data.get('version')}, newer than this pcompile reads ({VERSION}); upgrade pcompile")
    try:
        raw = bytes.fromhex(data["cuda_device_prop"]["hex"])
        attrs = data["attributes"]
        name = data["name"]
    except (KeyError, TypeError, ValueError):
        raise PcompileError(f"{source} is missing cudaDeviceProp bytes, attributes or name; capture it again") from None
    if len(raw) < PROP_SIZE_CUDA13 or not attrs or not name:
        raise PcompileError(f"{source} has an incomplete cudaDeviceProp ({len(raw)} bytes); capture it again")
    prof = DeviceProfile(data, source)
    if prof.fields()["name"] != name:
        raise PcompileError(f"{source}: name field and cudaDeviceProp bytes disagree; the file was edited, capture it again")
    return prof


def load(path: str | Path) -> DeviceProfile:
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise PcompileError(f"device profile {p} not found; pass a built-in name ({', '.join(builtin_names())}) or a file") from None
    except json.JSONDecodeError as exc:
        raise PcompileError(f"device profile {p} is not valid JSON ({exc.msg}); capture it again") from None
    return validate(data, str(p))


def builtin_names() -> list[str]:
    return sorted(p.stem for p in BUILTIN_DIR.glob("*.json"))


def resolve(target: str | None) -> DeviceProfile:
    """A file path, a built-in board name, or an alias (h100, h200, sm_90); None means DEFAULT_BOARD."""
    if target and (Path(target).is_file() or target.endswith(".json")):
        return load(target)
    names = builtin_names()
    if target is None:
        if DEFAULT_BOARD in names:
            return load(BUILTIN_DIR / f"{DEFAULT_BOARD}.json")
        raise PcompileError(f"pass --target (one of: {', '.join(names) or 'none shipped'}), or a profile file from `pcompile profile`")
    key = target.lower()
    key = ALIASES.get(key, key)
    if key in names:
        return load(BUILTIN_DIR / f"{key}.json")
    raise PcompileError(f"unknown target {target!r}; use one of {', '.join(names + sorted(ALIASES))}, or a profile file from `pcompile profile`")


def short_name(board_file: str) -> str:
    """What a person types for a built-in board: its shortest alias (h100), else the file's name."""
    aliases = sorted((a for a, f in ALIASES.items() if f == board_file and not a.startswith(("sm", "hopper"))), key=len)
    return aliases[0] if aliases else board_file


def builtin_for(name: str) -> str | None:
    """The --target that warms for the board CUDA calls `name` (NVIDIA H200 -> h200), or None
    when no built-in profile has that name (then `pcompile profile` captures one)."""
    for stem in builtin_names():
        try:
            if json.loads((BUILTIN_DIR / f"{stem}.json").read_text()).get("name") == name:
                return short_name(stem)
        except (OSError, ValueError):
            continue
    return None


def describe(prof: DeviceProfile) -> str:
    """Readable multi-line summary for `pcompile profile --show`."""
    f = prof.fields()
    d = prof.data
    mib = f["totalGlobalMem"] // (1024 * 1024)
    lines = [
        f"{prof.name}  ({prof.arch}, board {prof.board or '?'})",
        f"  profile format v{d.get('version')}  captured {d.get('captured_at', '?')}",
        f"  driver {d.get('driver_version')} ({d.get('driver_release', '?')})  runtime {d.get('runtime_version')}",
        f"  SMs {f['multiProcessorCount']}  memory {mib} MiB  bus {f['memoryBusWidth']} bits  L2 {f['l2CacheSize'] // 1024 // 1024} MiB",
        f"  threads/SM {f['maxThreadsPerMultiProcessor']}  threads/block {f['maxThreadsPerBlock']}  warp {f['warpSize']}",
        f"  regs/SM {f['regsPerMultiprocessor']}  regs/block {f['regsPerBlock']}",
        f"  smem/block {f['sharedMemPerBlock']}  opt-in {f['sharedMemPerBlockOptin']}  smem/SM {f['sharedMemPerMultiprocessor']}",
        f"  cudaDeviceProp {len(prof.prop_bytes)} bytes, {len(prof.attributes)} device attributes",
    ]
    if (d.get("host") or {}).get("cpu_threads"):  # the warm runs the script with it (warm/host_threads.py)
        lines.append(f"  host: torch runs {d['host']['cpu_threads']} CPU threads there")
    lines += software_lines(prof)
    return "\n".join(lines)


#: software every cache key holds (keys/fingerprint.py): the GPU job must run what the warm host ran
KEYED = ("torch", "triton", "cudnn", "python")


def software_lines(prof: DeviceProfile) -> list[str]:
    """The profile's software, saying what it is for: only the warm host's and the GPU job's
    versions enter keys; a profile records its capture host's, which for a built-in profile is
    some host of ours, not the user's GPU host."""
    sw = prof.software
    if not sw:
        return []
    try:
        builtin = Path(prof.source).resolve().parent == BUILTIN_DIR
    except (OSError, TypeError):
        builtin = False
    if builtin:
        head = ("  software of the host this built-in profile was captured on (reference only: a built-in profile "
                "gives the board's properties; the GPU job must run the warm host's torch, triton, cuDNN and Python):")
    else:
        head = ("  software of the GPU host it was captured on (* = in every cache key: the warm host must run the "
                "same, or the GPU job misses everything the warm wrote; `pcompile warm` warns when they differ):")
    out = [head]
    for k in sorted(sw):
        value = sw[k]
        if k == "ptxas" and str(value).startswith("unknown"):
            value = f"{value}: not recorded (a probe of an older pcompile failed); `pcompile profile` records it"
        out.append(f"  {'*' if k in KEYED and not builtin else ' '} {k}: {value}")
    return out
