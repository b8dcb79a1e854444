"""Inductor's CPU vector-ISA probe: `torch._inductor.cpu_vec_isa.VecISA.check_build`.

Why: before its first CPU graph, Inductor picks the vector ISA (`pick_vec_isa`) by building, for
every ISA the CPU reports (AVX-512 VNNI, AVX-512, AVX2, with bf16/AMX variants), a small C++ file
that includes ATen's vector headers into `<inductor cache>/<xx>/<key>.so` (seconds of g++ each)
and then dlopen-ing it in a child Python, unless `<so>.load_ok` says it loaded before. A node
whose Inductor dir is empty pays all of it (about 5 s of a 6 s first step on a 2-core host) even
when every graph and kernel comes from the shared tier. pcompile stores those libraries
(pcompile/inductor/isa_probe_cache.py); this module names them as `check_build` does and
routes the method through a wrapper.

Touched (torch 2.14.1, 2.15.0): `VecISA.check_build(self, code)` (one method, no subclass overrides it)
writes `code` with `codecache.write(code, "cpp", extra=_get_isa_dry_compile_fingerprint(
self.build_arch_flags()))`, whose key hashes the code, the ISA flags, the compiler's version and
torch's; builds `CppBuilder(key, [input], CppTorchOptions(vec_isa=self, warning_all=False),
dirname(input))` into `get_target_file_path()` unless that file exists; skips the dlopen probe
when `<target>.load_ok` exists and writes it after a successful probe.
"""
from __future__ import annotations

import inspect
import os
from typing import Any, Callable

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.14.1, 2.15.0 (2.11.0 read: its check_build keeps no .load_ok marker and always runs '
                    'the dlopen child; check() fails by design (SINCE_TORCH) and the probe stays stock)'}
#: Older torch: the check fails by design and the feature stays stock (see the docstring).
SINCE_TORCH = (2, 14)

#: The file `check_build` writes next to a library whose dlopen probe passed.
LOAD_OK_SUFFIX = ".load_ok"
_ORIGINAL_ATTR = "_pcompile_original"
#: What `check_build`'s body must still do for the stored library and marker to stand in for it.
_BODY_MARKERS = ("_get_isa_dry_compile_fingerprint", "get_target_file_path", "os.path.isfile(output_path)",
                 '".load_ok"')

CheckBuild = Callable[[Any, str], bool]


def _isa_module() -> Any:
    import torch._inductor.cpu_vec_isa as isa

    return isa


def supported() -> bool:
    """torch 2.14+ skips the dlopen child when a `.load_ok` marker exists; 2.11-2.13's check_build
    always runs it and keeps no marker. There the probe stays stock, silently: it is a CPU-host
    start-up saving, not a layer a job's artifacts depend on (check() still fails loudly in the
    compat test of a torch that has the marker and moved it)."""
    try:
        return '".load_ok"' in inspect.getsource(original())
    except Exception:
        return False


def check() -> None:
    isa = _isa_module()
    vec_isa = require_attr(isa, "VecISA", "torch._inductor.cpu_vec_isa")
    fn = original()
    params = list(inspect.signature(fn).parameters)
    if params != ["self", "code"]:
        raise CompatError(f"VecISA.check_build takes {params}, expected (self, code)")
    try:
        body = inspect.getsource(fn)
    except (OSError, TypeError) as exc:
        raise CompatError(f"cannot read VecISA.check_build's source ({exc})") from exc
    missing = [m for m in _BODY_MARKERS if m not in body]
    if missing:
        raise CompatError(f"VecISA.check_build no longer uses {', '.join(missing)}: the ISA probe would not find "
                          "the libraries pcompile puts in place")
    for sub in vec_isa.__subclasses__():
        if "check_build" in vars(sub):
            raise CompatError(f"{sub.__name__} overrides VecISA.check_build")
    require_attr(isa, "_get_isa_dry_compile_fingerprint", "torch._inductor.cpu_vec_isa")
    import torch._inductor.codecache as codecache
    import torch._inductor.cpp_builder as cpp_builder

    require_attr(codecache, "write", "torch._inductor.codecache")
    builder = require_attr(cpp_builder, "CppBuilder", "torch._inductor.cpp_builder")
    require_attr(builder, "get_target_file_path", "CppBuilder")
    require_attr(cpp_builder, "CppTorchOptions", "torch._inductor.cpp_builder")
    require_attr(cpp_builder, "normalize_path_separator", "torch._inductor.cpp_builder")


def original() -> CheckBuild:
    import torch._inductor.cpu_vec_isa as isa

    fn = isa.VecISA.check_build
    return getattr(fn, _ORIGINAL_ATTR, fn)


def install(wrapper_factory: Callable[[CheckBuild], CheckBuild]) -> None:
    """Replace `VecISA.check_build` with `wrapper_factory(original)`; idempotent."""
    cls = _isa_module().VecISA
    current = cls.check_build
    if getattr(current, _ORIGINAL_ATTR, None) is not None:
        return
    wrapped = wrapper_factory(current)
    setattr(wrapped, _ORIGINAL_ATTR, current)
    cls.check_build = wrapped


def uninstall() -> None:
    cls = _isa_module().VecISA
    orig = getattr(cls.check_build, _ORIGINAL_ATTR, None)
    if orig is not None:
        cls.check_build = orig


def probe_library(vec_isa: Any, code: str) -> str:
    """The library `check_build(vec_isa, code)` builds, named as it names it (this writes the
    probe's source file into the Inductor cache dir, as `check_build` does first)."""
    import torch._inductor.cpu_vec_isa as isa
    from torch._inductor.codecache import write
    from torch._inductor.cpp_builder import CppBuilder, CppTorchOptions, normalize_path_separator

    key, input_path = write(code, "cpp", extra=isa._get_isa_dry_compile_fingerprint(vec_isa.build_arch_flags()))
    builder = CppBuilder(key, [input_path], CppTorchOptions(vec_isa=vec_isa, warning_all=False),
                         os.path.dirname(input_path))
    return str(normalize_path_separator(builder.get_target_file_path()))


def probed_isas() -> list[Any]:
    """Every ISA instance `pick_vec_isa` may probe on x86 (tests name their libraries)."""
    import torch._inductor.cpu_vec_isa as isa

    return list(isa.supported_vec_isa_list)


def probe_code() -> str:
    """The source every ISA's first probe builds (tests)."""
    import torch._inductor.cpu_vec_isa as isa

    return str(isa.VecISA._avx_code)
