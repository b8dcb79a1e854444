"""compat/program_generated_code.py against the installed torch: a code made by `exec` (a dataclass's
`__init__`) is named through the function holding it (the restart that traced it every time:
`test_programs.py::test_a_frame_in_exec_generated_code_restarts_from_the_program`)."""
from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from pcompile.compat import program_generated_code as compat  # noqa: E402


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


HIDDEN = {"f": lambda v: v + 1}  # reachable through a dict only: no name leads to it


def test_check_passes_on_this_torch() -> None:
    compat.check()


def test_a_dataclass_init_is_named_through_its_class_and_torch_finds_it_again() -> None:
    from torch._dynamo import package

    code = Point.__init__.__code__
    assert code.co_filename == "<string>"  # what torch cannot name by file
    assert compat.holder_name(code) == (__name__, "Point.__init__")
    assert compat.holder_name(HIDDEN["f"].__code__) is None
    entry = package._DynamoCodeCacheEntry.__new__(package._DynamoCodeCacheEntry)
    entry.python_module, entry.function_names, entry.code_source = __name__, ["Point.__init__"], "__code__"
    assert package._lookup_code(entry) is code


def test_install_names_generated_code_torch_could_not_and_uninstall_restores_torch() -> None:
    from torch._dynamo import package

    before = package.CompilePackage._add_user_function
    pkg = package.CompilePackage.__new__(package.CompilePackage)
    pkg._codes = {}
    code = Point.__init__.__code__
    with pytest.raises(package.PackageError):
        before(pkg, code)
    compat.install()
    try:
        package.CompilePackage._add_user_function(pkg, code)
        entry = pkg._codes[code]
        assert (entry.python_module, list(entry.function_names), entry.code_source) == \
            (__name__, ["Point.__init__"], "__code__")
        with pytest.raises(package.PackageError):  # still unnamed: as torch failed it
            package.CompilePackage._add_user_function(pkg, HIDDEN["f"].__code__)
    finally:
        compat.uninstall()
    assert package.CompilePackage._add_user_function is before
