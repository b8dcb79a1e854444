"""compat/program_property_code.py against the installed torch: a property getter's code is named
through the property (the restart that traced it every time:
`test_programs.py::test_a_frame_in_a_property_getter_restarts_from_the_program`)."""
from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")

from pcompile.compat import program_property_code as compat  # noqa: E402


class Holder:
    @property
    def value(self) -> int:
        return 1

    @value.setter
    def value(self, v: int) -> None:
        pass

    @functools.cached_property
    def cached(self) -> int:
        return 2

    def plain(self) -> int:
        return 3


def test_check_passes_on_this_torch() -> None:
    compat.check()


def test_accessors_are_named_through_their_property_and_torch_finds_them_again() -> None:
    from torch._dynamo import package

    getter = Holder.value.fget.__code__
    assert compat.accessor_name(getter) == ("Holder.value.fget", "__code__")
    assert compat.accessor_name(Holder.value.fset.__code__) == ("Holder.value.fset", "__code__")
    assert compat.accessor_name(Holder.cached.func.__code__) == ("Holder.cached.func", "__code__")
    assert compat.accessor_name(Holder.plain.__code__) is None  # torch names it itself
    entry = package._DynamoCodeCacheEntry.__new__(package._DynamoCodeCacheEntry)
    entry.python_module, entry.function_names, entry.code_source = __name__, ["Holder.value.fget"], "__code__"
    assert package._lookup_code(entry) is getter


def test_install_names_a_getter_torch_could_not_and_uninstall_restores_torch() -> None:
    from torch._dynamo import package

    before = package._get_code_source
    with pytest.raises(package.PackageError):
        before(Holder.value.fget.__code__)
    compat.install()
    try:
        assert package._get_code_source(Holder.value.fget.__code__) == ("Holder.value.fget", "__code__")
        assert package._get_code_source(Holder.plain.__code__) == before(Holder.plain.__code__)
    finally:
        compat.uninstall()
    assert package._get_code_source is before
