"""compat/profiler_state.py: the profiler and dispatch-mode probes still exist and answer."""
from __future__ import annotations

import torch

from pcompile.compat import profiler_state


def test_check_passes_on_this_torch() -> None:
    profiler_state.check()


def test_probes_see_a_running_profiler_and_a_dispatch_mode() -> None:
    probes = profiler_state.probes()
    assert probes is not None
    enabled, mode = probes
    assert enabled() is False and mode() is None
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert enabled() is True
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        assert mode() is not None
