"""`nvidia-smi` for the warm child: the virtual devices as the management tool would list them.

Training scripts shell out to `nvidia-smi` to log the machine (modded-nanogpt prints its table
into every run log) or to read a field (`--query-gpu=name,memory.total --format=csv`). On a warm
host there is none (FileNotFoundError, the script dies) or a real one describing the host's GPUs,
which never matter to the warm. `preload.child_env` puts this one first on the child's PATH: it
answers from the same profile and device count as the virtual CUDA device (name, memory, bus ids,
UUIDs as vnvml.c gives them, driver release, CUDA version) and reports an idle device (no memory
used, no processes); what a profile does not hold (temperature, power, clocks) reads `[N/A]`, as
nvidia-smi prints unsupported fields. The header names it as pcompile's.

Covered: the default table, `-L`, `--query-gpu=FIELDS --format=csv[,noheader][,nounits]`,
`-i/--id`, `--query-compute-apps` (no processes). Anything else prints the table.
"""
from __future__ import annotations

import os
import shlex
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pcompile import settings

# cudaDeviceProp offsets (CUDA 13 layout, as vcuda.c reads them)
_OFF_MEM, _OFF_MAJOR, _OFF_MINOR = 288, 360, 364
_OFF_PCI_BUS, _OFF_PCI_DEVICE, _OFF_PCI_DOMAIN = 568, 572, 576
_NA = "[N/A]"


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    mib: int
    cc: str
    bus_id: str
    uuid: str


def _devices(env: dict[str, str]) -> tuple[list[Gpu], str, str]:
    """(devices, driver release, CUDA version) from the flat profile the virtual device reads."""
    fields: dict[str, str] = {}
    with open(settings.VDEV_PROFILE.get(env)) as fh:
        for line in fh:
            key, _, value = line.rstrip("\n").partition(" ")
            fields.setdefault(key, value)
    prop = bytes.fromhex(fields["prop"])
    i32 = lambda off: struct.unpack_from("<i", prop, off)[0]  # noqa: E731
    mib = struct.unpack_from("<Q", prop, _OFF_MEM)[0] // (1024 * 1024)
    cuda = int(fields.get("driver_version", "13000"))
    gpus = [Gpu(i, fields["name"], mib, f"{i32(_OFF_MAJOR)}.{i32(_OFF_MINOR)}",
                f"{i32(_OFF_PCI_DOMAIN):08X}:{i32(_OFF_PCI_BUS) + i:02X}:{i32(_OFF_PCI_DEVICE):02X}.0",
                f"GPU-00000000-0000-0000-0000-0000000000{i:02d}")  # vnvml.c's nvmlDeviceGetUUID
            for i in range(settings.VDEV_DEVICES.get(env))]
    return gpus, fields.get("driver_release", "pcompile-virtual"), f"{cuda // 1000}.{cuda % 1000 // 10}"


def _field(name: str, g: Gpu, driver: str, cuda: str, count: int, units: bool) -> str | None:
    mem = lambda v: f"{v} MiB" if units else str(v)  # noqa: E731
    pct = "0 %" if units else "0"
    values = {
        "index": str(g.index), "name": g.name, "gpu_name": g.name, "uuid": g.uuid, "gpu_uuid": g.uuid,
        "pci.bus_id": g.bus_id, "gpu_bus_id": g.bus_id, "driver_version": driver, "count": str(count),
        "memory.total": mem(g.mib), "memory.used": mem(0), "memory.free": mem(g.mib), "memory.reserved": mem(0),
        "compute_cap": g.cc, "utilization.gpu": pct, "utilization.memory": pct, "persistence_mode": "Enabled",
        "compute_mode": "Default", "mig.mode.current": "Disabled", "pstate": "P0", "display_mode": "Disabled",
    }
    if name in values:
        return values[name]
    if name.split(".")[0] in ("temperature", "power", "clocks", "fan", "ecc", "clocks_throttle_reasons",
                              "clocks_event_reasons", "vbios_version", "serial", "enforced", "module"):
        return _NA
    return None


def _query(spec: str, fmt: str, gpus: list[Gpu], driver: str, cuda: str) -> int:
    names = [n.strip() for n in spec.split(",") if n.strip()]
    opts = {o.strip() for o in fmt.split(",")}
    units = "nounits" not in opts
    rows = []
    for g in gpus:
        row = []
        for n in names:
            v = _field(n, g, driver, cuda, len(gpus), units)
            if v is None:
                print(f'Field "{n}" is not a valid field to query.\n')
                return 2
            row.append(v)
        rows.append(", ".join(row))
    if "noheader" not in opts:
        print(", ".join(names))
    print("\n".join(rows))
    return 0


def _table(gpus: list[Gpu], driver: str, cuda: str) -> str:
    row = lambda a, b, c: f"|{a:<41}|{b:<24}|{c:<22}|"  # noqa: E731
    w = 91
    rule, line = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+", "+" + "-" * (w - 2) + "+"
    full = lambda text: f"| {text:<{w - 4}} |"  # noqa: E731
    out = [time.strftime("%a %b %d %H:%M:%S %Y"), line,
           full(f"{'NVIDIA-SMI pcompile-virtual':<34}{'Driver Version: ' + driver:<32}CUDA Version: {cuda}"),
           "|" + rule[1:-1] + "|",
           row(" GPU  Name                 Persistence-M ", " Bus-Id          Disp.A ", " Volatile Uncorr. ECC "),
           row(" Fan  Temp   Perf          Pwr:Usage/Cap ", "           Memory-Usage ", " GPU-Util  Compute M. "),
           row("", "", "               MIG M. "), "|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|"]
    for g in gpus:
        out += [row(f" {g.index:>3}  {g.name[:29]:<29}  On  ", f" {g.bus_id:>18} Off ", f" {'0':>20} "),
                row(" N/A   N/A    P0            N/A /  N/A  ", f" {'0MiB / ' + str(g.mib) + 'MiB':>22} ",
                    f" {'0%      Default':>20} "),
                row("", "", f" {'Disabled':>20} "), rule]
    out += [" " * w, line, full("Processes:"),
            full(" GPU   GI   CI              PID   Type   Process name                        GPU Memory"),
            full("       ID   ID                                                               Usage"),
            "|" + "=" * (w - 2) + "|", full(" No running processes found"), line]
    return "\n".join(out)


def install(bin_dir: Path, env: dict[str, str]) -> None:
    """An `nvidia-smi` in `bin_dir`, first on env's PATH, that runs this module."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    tool = bin_dir / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m pcompile.vdev.smi \"$@\"\n")
    tool.chmod(0o755)
    env["PATH"] = os.pathsep.join([str(bin_dir), *[p for p in env.get("PATH", "").split(os.pathsep) if p]])


def main(argv: list[str] | None = None, env: dict[str, str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    env = dict(os.environ) if env is None else env
    gpus, driver, cuda = _devices(env)
    opts: dict[str, str] = {}
    it = iter(argv)
    for a in it:
        key, eq, value = a.partition("=")
        if key in ("-i", "--id", "--query-gpu", "--format", "--query-compute-apps") and not eq:
            value = next(it, "")
        opts[key] = value
    ids = opts.get("-i") or opts.get("--id")
    if ids:
        wanted = {int(x) for x in ids.split(",") if x.strip().isdigit()}
        gpus = [g for g in gpus if g.index in wanted] or gpus[:0]
        if not gpus:
            print(f"No devices were found matching {ids}")
            return 6
    if "-L" in opts or "--list-gpus" in opts:
        print("\n".join(f"GPU {g.index}: {g.name} (UUID: {g.uuid})" for g in gpus))
        return 0
    if "--query-gpu" in opts:
        return _query(opts["--query-gpu"], opts.get("--format", "csv"), gpus, driver, cuda)
    if "--query-compute-apps" in opts:
        if "noheader" not in opts.get("--format", ""):
            print(", ".join(n.strip() for n in opts["--query-compute-apps"].split(",")))
        return 0
    print(_table(gpus, driver, cuda))
    return 0


if __name__ == "__main__":
    sys.exit(main())
