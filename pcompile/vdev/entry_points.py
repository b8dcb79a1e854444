"""Which libcuda / libnvidia-ml entry points the installed GPU libraries can ask the virtual device for.

A library reaches the driver in two ways: it links a symbol (an undefined `cu*`/`cuda*`/`nvml*` in
its dynamic symbol table, resolved by the dynamic linker: to our preloaded library, or for the
runtime to the real libcudart, which cannot run on a fake driver), or it looks a name up at run
time by string (`cuGetProcAddress`, `cudaGetDriverEntryPoint`, `dlsym`: torch's driver table,
Triton's launcher, NCCL, and the CUDA runtime that cuDNN/cuBLAS/NCCL link statically). The second
kind is found in the names the binaries carry in their read-only data. Every name found must be
defined by the virtual device (vcuda.c / vnvml.c, or a generated NOT_SUPPORTED stub), else a new
torch/CUDA build dies with "undefined symbol" or falls through to the real runtime ("unknown error").

    python -m pcompile.vdev.entry_points --write   # regenerate entry_points.txt from this install
    python -m pcompile.vdev.entry_points --check   # exit 1, naming them, if a name is missing

The table (entry_points.txt, committed) is what build.py turns into weak stubs; tests check that
the installed libraries ask for nothing outside it. Runtime (`cuda*`) names count only when linked:
libraries that carry their own runtime resolve those internally and reach the driver by name.
"""
from __future__ import annotations

import argparse
import importlib.util
import mmap
import re
import struct
import subprocess
import sys
from pathlib import Path

TABLE = Path(__file__).with_name("entry_points.txt")
#: sections that hold string literals (names passed to cuGetProcAddress/dlsym) and the dynamic
#: symbol names; the rest of a cuDNN/cuBLAS binary is mostly device code and is skipped
STRING_SECTIONS = (b".rodata", b".lrodata", b".dynstr", b".data", b".data.rel.ro")
#: an API name: cu/nvml, then CamelCase words (drops prose such as "cuDNN", "cuBLAS", "cuFFT")
_NAME = re.compile(rb"(?<![A-Za-z0-9_])((?:cu|nvml)[A-Z][a-z]+(?:[A-Z0-9][A-Za-z0-9]*)*(?:_v[0-9]+)?(?:_pt[sd][sz])?)(?![A-Za-z0-9])")
_LINKED = re.compile(r"^(?:__cuda[A-Z]\w*|cuda[A-Z]\w*|cu[A-Z]\w*|nvml[A-Z]\w*)$")
#: names in string data that are not functions (types, struct-version constants)
_NOT_FUNCTIONS = re.compile(r"(_t|_st|_enum)$")
#: the driver API's groups (CUDA Driver API reference): a looked-up name counts only inside one, so
#: prose and other libraries' names in the same data ("cuDNN", cuComplex's cuAdd, libcufile's
#: cuFileRead, which a preloaded stub would shadow) are not taken for driver calls
DRIVER_GROUPS = ("cuArray", "cuArray3D", "cuCheckpoint", "cuCoredump", "cuCtx", "cuDestroyExternalMemory",
                 "cuDestroyExternalSemaphore", "cuDevice", "cuDevResource", "cuDevSmResource", "cuDriverGetVersion",
                 "cuEvent", "cuExternalMemory", "cuFlushGPUDirectRDMAWrites", "cuFunc", "cuGetErrorName",
                 "cuGetErrorString", "cuGetExportTable", "cuGetProcAddress", "cuGraph", "cuGreenCtx",
                 "cuImportExternal", "cuInit", "cuIpc", "cuKernel", "cuLaunch", "cuLibrary", "cuLink", "cuLogs",
                 "cuMem", "cuMipmappedArray", "cuModule", "cuMulticast", "cuOccupancy", "cuParam", "cuPointer",
                 "cuProfiler", "cuSignalExternalSemaphores", "cuStream", "cuSubgrid", "cuSurf", "cuTensorMap", "cuTex",
                 "cuThreadExchangeStreamCaptureMode", "cuUserObject", "cuWaitExternalSemaphores", "cuCtxFromGreenCtx")
#: NVML's groups; struct-version constants (nvmlPciInfoExt_v1) and prose fall outside
NVML_GROUPS = ("nvmlInit", "nvmlShutdown", "nvmlErrorString", "nvmlDevice", "nvmlSystem", "nvmlUnit", "nvmlEvent",
               "nvmlVgpu", "nvmlGpuInstance", "nvmlComputeInstance", "nvmlGpm", "nvmlGetVgpu", "nvmlSetVgpu",
               "nvmlGetExcluded", "nvmlGetBlacklist")


#: groups that are whole function names too (a bare "cuMem" or "cuFunc" is prose)
_WHOLE = {"cuInit", "cuDriverGetVersion", "cuGetErrorName", "cuGetErrorString", "cuGetExportTable", "cuGetProcAddress",
          "cuFlushGPUDirectRDMAWrites", "cuThreadExchangeStreamCaptureMode", "cuCtxFromGreenCtx",
          "cuSignalExternalSemaphores", "cuWaitExternalSemaphores", "cuDestroyExternalMemory",
          "cuDestroyExternalSemaphore", "nvmlInit", "nvmlShutdown", "nvmlErrorString"}


def in_api(name: str) -> bool:
    """True if `name` is a driver or NVML function: in one of their groups (runtime names always are)."""
    if name.startswith(("cuda", "__cuda")):
        return True
    groups = NVML_GROUPS if name.startswith("nvml") else DRIVER_GROUPS
    if name in _WHOLE:
        return True
    return any(name.startswith(g) and len(name) > len(g) and (name[len(g)].isupper() or name[len(g)].isdigit()
                                                               or name[len(g)] == "_") for g in groups)


def _package_dirs(name: str) -> list[Path]:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def installed_libraries() -> list[Path]:
    """torch's, triton's, NCCL's, cuDNN's and cuBLAS's shared libraries in this environment."""
    out: list[Path] = []
    for d in _package_dirs("torch"):
        out += sorted((d / "lib").glob("*.so*"))
    for d in _package_dirs("triton"):
        out += sorted((d / "_C").glob("*.so*"))
    for d in _package_dirs("nvidia"):
        for pattern in ("cudnn/lib/*.so*", "nccl/lib/*.so*", "*/lib/libcublas*.so*"):
            out += sorted(d.glob(pattern))
    return [p for p in out if p.is_file()]


def linked_names(lib: Path) -> set[str]:
    """Undefined driver/runtime/NVML symbols of `lib` (what the dynamic linker must resolve)."""
    proc = subprocess.run(["nm", "-D", "--undefined-only", str(lib)], capture_output=True, text=True)
    names = {line.split()[-1].split("@")[0] for line in proc.stdout.splitlines() if line.strip()}
    return {n for n in names if _LINKED.match(n) and in_api(n)}  # libcufile's cuFile* are not the driver's


def _string_sections(data: mmap.mmap) -> list[tuple[int, int]]:
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return []
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    def section(i: int) -> tuple[int, int, int]:
        name, _type, _flags, _addr, off, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        return name, off, size
    _, str_off, _ = section(shstrndx)
    out = []
    for i in range(shnum):
        name_off, off, size = section(i)
        end = data.find(b"\0", str_off + name_off)
        if data[str_off + name_off:end] in STRING_SECTIONS and off + size <= len(data):
            out.append((off, size))
    return out


def looked_up_names(lib: Path) -> set[str]:
    """Driver and NVML names `lib` carries as strings: what it can fetch by name at run time."""
    names: set[str] = set()
    with open(lib, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        for off, size in _string_sections(data):
            names.update(m.group(1).decode() for m in _NAME.finditer(data, off, off + size))
    return {n for n in names if in_api(n) and not _NOT_FUNCTIONS.search(n)}


def triton_driver_names() -> set[str]:
    """Names Triton's launcher source (compiled at run time against "the" libcuda.so.1) uses."""
    names: set[str] = set()
    for d in _package_dirs("triton"):
        src = d / "backends" / "nvidia" / "driver.c"
        if src.exists():
            names.update(re.findall(r"\b(cu[A-Z][a-z]+\w*)\b", src.read_text()))
    # cuLaunchKernelExHandle and the like are its variables holding dlsym'd functions
    return {n for n in names if in_api(n) and not n.endswith("Handle") and not _NOT_FUNCTIONS.search(n)}


def asked() -> dict[str, str]:
    """Every entry point the installed libraries can ask for -> one library that asks for it."""
    who: dict[str, str] = {}
    for lib in installed_libraries():
        for name in linked_names(lib) | looked_up_names(lib):
            who.setdefault(name, lib.name)
    for name in triton_driver_names():
        who.setdefault(name, "triton/backends/nvidia/driver.c")
    return who


def read_table(path: Path = TABLE) -> list[str]:
    return [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def write_table(names: set[str], path: Path = TABLE) -> None:
    header = ("# Entry points the virtual device defines (generated: python -m pcompile.vdev.entry_points --write).\n"
              "# Each is implemented in vcuda.c / vnvml.c or gets a counted NOT_SUPPORTED stub (build.py).\n")
    path.write_text(header + "".join(f"{n}\n" for n in sorted(names)))


def defined_names(lib: Path) -> set[str]:
    """Symbols a built library exports."""
    proc = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
    return {line.split()[-1].split("@")[0] for line in proc.stdout.splitlines() if line.strip()}


def missing_from(defined: set[str], wanted: dict[str, str]) -> dict[str, str]:
    return {n: who for n, who in sorted(wanted.items()) if n not in defined}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="add this install's names to entry_points.txt")
    ap.add_argument("--check", action="store_true", help="exit 1 if the table lacks a name this install asks for")
    args = ap.parse_args(argv)
    wanted = asked()
    table = set(read_table()) if TABLE.exists() else set()
    gone = missing_from(table, wanted)
    if args.write:
        write_table(table | set(wanted))
        print(f"{TABLE}: {len(table | set(wanted))} names ({len(gone)} new)")
        return 0
    for name, who in gone.items():
        print(f"{name}  (asked by {who})")
    return 1 if gone and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
