"""compat/cpp_pch.py: Inductor's precompiled header is still built through `_worker_compile_cpp`
and every compile still runs `CppBuilder.build`, which the hook sees first."""
from __future__ import annotations

from pathlib import Path

from pcompile.compat import cpp_pch as compat


def test_check_passes_on_this_torch() -> None:
    compat.check()


def test_build_hook_sees_every_build_and_uninstall_restores(tmp_path: Path) -> None:
    from torch._inductor.cpp_builder import CppBuilder, CppOptions

    original = CppBuilder.build
    was_hooked = hasattr(original, "_pcompile_original")
    compat.uninstall_build_hook()
    stock = CppBuilder.build
    seen: list[str] = []
    compat.install_build_hook(lambda builder: seen.append(builder.get_target_file_path()))
    try:
        source = tmp_path / "probe.cpp"
        source.write_text('extern "C" int probe() { return 1; }\n')
        builder = CppBuilder(name="probe", sources=str(source), BuildOption=CppOptions(), output_dir=str(tmp_path))
        builder.build()
        assert seen == [builder.get_target_file_path()] and Path(seen[0]).is_file()
    finally:
        compat.uninstall_build_hook()
    assert CppBuilder.build is stock
    if was_hooked:
        from pcompile.inductor import lazy_pch

        compat.install_build_hook(lazy_pch._before_build)
