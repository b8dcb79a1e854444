"""The settings registry: one parser per type, bad values give one line and the default, only
pcompile/settings.py reads PCOMPILE_* variables, and the README's table is generated from it."""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from pcompile import settings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import settings_table  # noqa: E402

_NAME = re.compile(r"PCOMPILE(_[A-Z0-9]+)*")
_ENV_CALLS = {"getenv", "get", "pop", "setdefault"}


def _is_var_name(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "name"


def env_reads_outside_registry(source: str) -> list[str]:
    """Places in `source` that name a PCOMPILE_* variable themselves, or read one by a registry
    variable's `.name` (which skips its parser): with neither, a module can only go through
    pcompile/settings.py. Docstrings and messages (`f"... PCOMPILE_X=..."`) are not names."""
    tree = ast.parse(source)
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _NAME.fullmatch(node.value):
            found.append(f"line {node.lineno}: {node.value!r}")
        elif isinstance(node, ast.keyword) and node.arg and _NAME.fullmatch(node.arg):
            found.append(f"line {node.value.lineno}: {node.arg}=")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _ENV_CALLS:
            environ = node.func.attr == "getenv" or ast.unparse(node.func.value).endswith("environ")
            if environ and node.args and _is_var_name(node.args[0]):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if ast.unparse(node.value).endswith("environ") and _is_var_name(node.slice):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_readme_settings_table_is_up_to_date() -> None:
    assert settings_table.main(["--check"]) == 0, "run: python tools/settings_table.py --write"


def test_no_module_but_the_registry_reads_pcompile_variables() -> None:
    stray = []
    for path in sorted((ROOT / "pcompile").rglob("*.py")):
        if path == ROOT / "pcompile" / "settings.py":
            continue
        stray += [f"{path.relative_to(ROOT)} {hit}" for hit in env_reads_outside_registry(path.read_text())]
    assert stray == [], "declare these in pcompile/settings.py and read them with VAR.get():\n" + "\n".join(stray)


def test_the_scan_finds_each_kind_of_read_it_claims() -> None:
    source = '''
import os
"""PCOMPILE_DOC in a docstring is text."""
ENV = "PCOMPILE_A"
a = os.environ.get("PCOMPILE_B", "")
b = os.getenv("PCOMPILE")
c = dict(os.environ, PCOMPILE_C="1")
d = os.environ.get(settings.MAX_BYTES.name)
e = os.environ[settings.MAX_BYTES.name]
os.environ[settings.MAX_BYTES.name] = "1"
f = f"set PCOMPILE_D=1 or {x}"
g = "PCOMPILE_RESULT "
'''
    hits = env_reads_outside_registry(source)
    assert sorted(h.split(":")[0] for h in hits) == ["line 4", "line 5", "line 6", "line 7", "line 8", "line 9"], hits


def test_every_variable_is_documented_and_named_once() -> None:
    names = list(settings.REGISTRY)
    assert len(names) == len(set(names))
    for var in settings.REGISTRY.values():
        assert _NAME.fullmatch(var.name), var.name
        assert var.doc and "\n" not in var.doc, var.name
        if var.default is not None and not isinstance(var.kind, settings.FilePath):
            shown = var.kind.show(var.default).removesuffix(" s")
            assert var.kind.parse(shown) == var.default, f"{var.name}: the default does not read back through its parser"


@pytest.mark.parametrize("text, expected", [("4096", 4096), ("20G", 20 << 30), ("20g", 20 << 30), ("512M", 512 << 20),
                                            ("1.5GiB", 3 << 29), ("64KB", 64 << 10), (" 2 T ", 2 << 40), ("1e9", 10**9),
                                            ("10737418240", 10 << 30)])
def test_sizes_take_suffixes(text: str, expected: int) -> None:
    assert settings.parse_size(text) == expected


@pytest.mark.parametrize("text", ["abc", "", "20X", "-1G", "G", "1.5.0G", "iB"])
def test_sizes_refuse_what_is_not_a_size(text: str) -> None:
    with pytest.raises(ValueError, match="is not a size"):
        settings.parse_size(text)


@pytest.mark.parametrize("raw, expected", [("1", True), ("on", True), (" Yes ", True), ("TRUE", True), ("0", False),
                                           ("off", False), ("FALSE", False), ("no", False)])
def test_on_off_spellings(monkeypatch: pytest.MonkeyPatch, raw: str, expected: bool) -> None:
    monkeypatch.setenv(settings.BACKWARD_AHEAD.name, raw)
    assert settings.BACKWARD_AHEAD.get() is expected


def test_unset_or_empty_is_the_default_and_says_nothing(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(settings.BACKWARD_AHEAD.name, raising=False)
    assert settings.BACKWARD_AHEAD.get() is None  # decided per machine
    monkeypatch.setenv(settings.MAX_BYTES.name, "")
    assert settings.MAX_BYTES.get() == 10 << 30
    assert capsys.readouterr().err == ""


def test_durations_choices_and_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    for raw, seconds in (("90", 90.0), ("2m", 120.0), ("1.5h", 5400.0), ("500ms", 0.5), ("30 s", 30.0)):
        monkeypatch.setenv(settings.LEASE_TIMEOUT.name, raw)
        assert settings.LEASE_TIMEOUT.get() == seconds
    monkeypatch.setenv(settings.POOL.name, "ray://head:10001")
    assert settings.POOL.get() == "ray://head:10001"
    monkeypatch.setenv(settings.POOL.name, " Threads")
    assert settings.POOL.get() == "local"
    with pytest.raises(ValueError, match="below the minimum 1"):
        settings.REMOTE_BREAKER_FAILURES.kind.parse("0")
    with pytest.raises(ValueError, match="above the maximum 64"):
        settings.VDEV_DEVICES.kind.parse("65")


def test_a_bad_value_warns_once_per_text_and_gives_the_default(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    settings.reload()
    monkeypatch.setenv(settings.SETTINGS_WARNED.name, "")
    monkeypatch.setenv(settings.MAX_BYTES.name, "abc")
    assert [settings.MAX_BYTES.get() for _ in range(3)] == [10 << 30] * 3
    settings.reload()  # a fresh parse of the same text: still one line per process
    assert settings.MAX_BYTES.get() == 10 << 30
    assert capsys.readouterr().err == ("pcompile: PCOMPILE_MAX_BYTES='abc' is not a size (like 20G); "
                                       "using the default 10G\n")
    monkeypatch.setenv(settings.MAX_BYTES.name, "20G")  # tests change os.environ: honoured at once
    assert settings.MAX_BYTES.get() == 20 << 30
    monkeypatch.setenv(settings.AUTOTUNE.name, "fastest")
    assert settings.AUTOTUNE.get() == "auto"
    assert capsys.readouterr().err == ("pcompile: PCOMPILE_AUTOTUNE='fastest' is not one of auto, predicted, benchmark; "
                                       "using the default auto\n")


def test_explicit_mappings_are_parsed_too(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Values read from a child's environment (not os.environ) go through the same parser."""
    settings.reload()
    monkeypatch.setenv(settings.SETTINGS_WARNED.name, "")
    assert settings.VDEV_DEVICES.get({settings.VDEV_DEVICES.name: "8"}) == 8
    assert settings.VDEV_DEVICES.get({}) == 1
    assert settings.VDEV_DEVICES.get({settings.VDEV_DEVICES.name: "x"}) == 1
    assert "PCOMPILE_VDEV_DEVICES='x' is not an integer; using the default 1" in capsys.readouterr().err


def test_a_removed_variable_says_so_once_and_is_not_a_setting(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A deleted setting set in a job: one line per job says it has no effect; unset or empty,
    nothing. A child that inherits the parent's mark stays quiet. (No variable is removed today:
    PCOMPILE_PROGRAMS came back as Dynamo programs; the mechanism is checked on a stand-in entry.)"""
    name = "PCOMPILE_TEST_GONE"
    monkeypatch.setitem(settings.REMOVED, name, settings.Removed(name, "gone for a test", "test"))
    assert name not in settings.REGISTRY
    settings.reload()
    monkeypatch.setenv(settings.SETTINGS_WARNED.name, "")
    monkeypatch.setenv(name, "")
    assert settings.warn_removed() == [] and capsys.readouterr().err == ""
    monkeypatch.setenv(name, "1")
    assert settings.warn_removed() == [name]
    settings.warn_removed()
    assert capsys.readouterr().err == f"pcompile: {name} was removed (gone for a test); it has no effect\n"
    settings.reload()  # as a child process: fresh memory, the parent's exported mark
    settings.warn_removed()
    assert capsys.readouterr().err == ""