"""compat/program_guard_failures.py against the installed torch: a call that fails the guards of a
program's frame is named (the behaviour:
`test_programs.py::test_a_call_that_fails_its_programs_guards_is_traced_and_the_failing_guard_named`)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pcompile.compat import program_guard_failures as compat  # noqa: E402


def _plain(x: int) -> int:
    return x + 1


def test_check_passes_on_this_torch() -> None:
    compat.check()


def test_a_code_without_precompiled_entries_is_no_guard_failure() -> None:
    assert compat.failing_guard(_plain.__code__, {"x": 1}) is None


def test_install_wraps_dynamos_compile_and_uninstall_restores_torch() -> None:
    from torch._dynamo import convert_frame

    before = convert_frame._compile
    told: list[tuple[object, str]] = []
    compat.install(lambda code, why: told.append((code, why)))
    try:
        assert convert_frame._compile is not before
        compiled = torch.compile(lambda t: t * 2, backend="eager")
        assert torch.equal(compiled(torch.ones(3)), torch.full((3,), 2.0))  # a compile through the wrapper
        assert told == []  # no program here: nothing failed
    finally:
        compat.uninstall()
    assert convert_frame._compile is before


def test_a_non_recursively_disabled_function_stays_untraced_with_the_hook() -> None:
    """Dynamo walks back over convert_frame.py's frames to find a `disable(recursive=False)`
    wrapper; the hook sits below that walk, so such a function is still run, not traced."""
    from torch._dynamo.utils import counters

    def inner(t: torch.Tensor) -> torch.Tensor:
        return t.sin() + 1

    skipped = torch._dynamo.disable(inner, recursive=False)

    def outer(t: torch.Tensor) -> torch.Tensor:
        return skipped(t * 2) * 3

    def graphs() -> int:
        torch._dynamo.reset()
        counters.clear()
        compiled = torch.compile(outer, backend="eager")
        compiled(torch.ones(4))
        return int(counters["stats"]["unique_graphs"])

    stock = graphs()
    compat.install(lambda code, why: None)
    try:
        assert graphs() == stock
    finally:
        compat.uninstall()
        torch._dynamo.reset()
