"""compat/dynamo_package.py: torch's precompile packages still load and save where pcompile
expects them to (test_programs.py runs the whole path in real processes)."""
from __future__ import annotations

import inspect

from pcompile.compat import dynamo_package as compat


def test_check_passes_on_this_torch() -> None:
    compat.check()


def test_torch_loads_packages_at_torch_compile_and_records_them_after_each_frame() -> None:
    import torch._dynamo.convert_frame as convert_frame
    import torch._dynamo.eval_frame as eval_frame
    import torch._dynamo.precompile_context as pctx

    call = eval_frame._TorchDynamoContext.__call__
    assert "DynamoCache.load(" in inspect.getsource(getattr(call, compat._ORIGINAL, call))
    assert "DynamoCache.record_package(" in inspect.getsource(convert_frame), \
        "convert_frame no longer records packages: programs would never be stored"
    assert "DynamoCache" in vars(pctx), "precompile_context no longer imports DynamoCache by name"


def test_install_routes_both_names_and_is_idempotent() -> None:
    import torch._dynamo.package as package
    import torch._dynamo.precompile_context as pctx

    class Nothing(compat.Hooks):
        def load(self, fn, backend, context):  # type: ignore[no-untyped-def]
            return None

        def changed(self, package_):  # type: ignore[no-untyped-def]
            pass

        def install_failed(self, package_, reason):  # type: ignore[no-untyped-def]
            pass

    import torch._dynamo.config as dconfig

    before = (package.DynamoCache, pctx.DynamoCache, dconfig.caching_precompile)
    try:
        compat.install(Nothing())
        compat.install(Nothing())
        assert package.DynamoCache is pctx.DynamoCache and compat.installed()
    finally:
        package.DynamoCache, pctx.DynamoCache, dconfig.caching_precompile = before


def test_id_named_globals_are_recognised() -> None:
    assert compat._BY_ID.search("___module_collections_140342279611280_c4")
    assert not compat._BY_ID.search("__import_torch_dot_nn_dot_modules_dot_linear")


def test_a_recorded_dispatch_state_is_forced_while_a_program_installs() -> None:
    """The dispatch-key state of the compiling call (autocast on) must be the one a loaded
    program's guards are built under, whatever the torch.compile() caller has on."""
    import torch

    from pcompile.compat import dynamo_package

    with torch.autocast("cpu", dtype=torch.bfloat16):
        state = [torch._C._dispatch_tls_local_include_set().raw_repr(), torch._C._dispatch_tls_local_exclude_set().raw_repr()]
    assert not torch.is_autocast_enabled("cpu")
    with dynamo_package._forced_dispatch_state(state):
        assert torch.is_autocast_enabled("cpu")  # autocast's key is no longer excluded
    assert not torch.is_autocast_enabled("cpu")
    with dynamo_package._forced_dispatch_state(None):
        assert not torch.is_autocast_enabled("cpu")
    # torch releases that keep each guard's build state need none of this
    assert (dynamo_package.dispatch_state() is None) == dynamo_package._guards_carry_dispatch_state()
