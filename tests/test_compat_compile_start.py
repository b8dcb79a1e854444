"""compat/compile_start.py: a callback at the first frame compile, never at the torch.compile call."""
from __future__ import annotations

from tests.conftest import run_py


def test_check_passes_on_this_torch():
    from pcompile.compat import compile_start

    compile_start.check()


def test_runs_once_at_the_first_frame_and_not_for_a_compiled_module_never_called():
    r = run_py("""
        import torch
        from pcompile.compat import compile_start
        calls = []
        compile_start.on_first_frame(lambda: calls.append(1))
        m = torch.nn.Linear(4, 4)
        cm = torch.compile(m, backend="eager")
        m(torch.randn(2, 4))              # the module itself, as nanoGPT's sample.py generate() does
        print("after call", len(calls))
        cm(torch.randn(2, 4)); cm(torch.randn(3, 4)); torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))
        print("after compiles", len(calls))
    """)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "after call 0" in r.stdout and "after compiles 1" in r.stdout, r.stdout


def test_a_failing_callback_never_breaks_the_compile():
    r = run_py("""
        import torch
        from pcompile.compat import compile_start
        compile_start.on_first_frame(lambda: 1 / 0)
        print(torch.compile(lambda x: x * 2, backend="eager")(torch.ones(2)).sum().item())
    """)
    assert r.returncode == 0 and "4.0" in r.stdout, r.stderr[-2000:]
