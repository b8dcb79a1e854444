"""compat/cpp_compile.py: every C++ build still goes through codecache._worker_compile_cpp(lock_path,
builders), looked up by name, with the library as the last builder's target."""
from __future__ import annotations

import inspect

from pcompile.compat import cpp_compile as compat


def test_check_passes_on_this_torch() -> None:
    compat.check()


def test_load_async_builds_jobs_from_the_module_attribute() -> None:
    import torch._inductor.codecache as codecache

    source = inspect.getsource(codecache.CppCodeCache.load_async)
    assert "_worker_compile_cpp" in source and "functools.partial" in source, \
        "CppCodeCache.load_async no longer builds its job from _worker_compile_cpp: C++ kernels would bypass pcompile"


def test_install_wraps_and_uninstall_restores() -> None:
    import torch._inductor.codecache as codecache

    original = compat.original()
    seen: list[str] = []

    def factory(orig):  # type: ignore[no-untyped-def]
        def wrapped(lock_path, builders):  # type: ignore[no-untyped-def]
            seen.append(compat.target_path(builders[-1]))
            return None

        return wrapped

    was_installed = codecache._worker_compile_cpp is not original
    compat.uninstall()
    compat.install(factory)
    try:
        from torch._inductor.cpp_builder import CppBuilder, CppOptions

        builder = CppBuilder(name="probe", sources="probe.cpp", BuildOption=CppOptions(), output_dir="/tmp/pcompile-probe")
        codecache._worker_compile_cpp("/tmp/pcompile-probe.lock", (builder,))
        assert seen and seen[0].endswith("probe.so")
        assert compat.original() is original
    finally:
        compat.uninstall()
        if was_installed:
            from pcompile.inductor import cpp_cache

            cpp_cache.install()
    assert compat.compiler_id() and "/" not in compat.compiler_id().split()[0]
