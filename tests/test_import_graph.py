"""The package floors hold: no import cycle between pcompile's packages, no upward import, no
module over 500 lines.

Every module is parsed with `ast`, so imports inside functions count as much as those at the top
(a function-level import is still a dependency, only a later one), and so do
`importlib.import_module("pcompile...")` and `importlib.util.find_spec("pcompile...")` calls with
a literal name. The floors (README, Layout):

    0  compat, and the top-level modules (errors, config, settings, logs, ...): the ground
    1  keys, store, trust, pool: content keys, the store and its tiers, signing, compile pools
    2  inductor, warm, vdev, events: the Inductor hooks, warm start, the virtual device, events
    3  cli: the commands

A package may import its own floor or any below it; imports between packages of one floor must
not form a cycle, and neither may imports between the modules of one package. Imports under
`if TYPE_CHECKING:` are annotations, not dependencies. A new package must be given a floor here
before it can land.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "pcompile"
MAX_LINES = 500

# Top-level modules (pcompile/x.py) are their own "package" named after the module.
FLOORS: dict[str, int] = {
    "compat": 0, "errors": 0, "config": 0, "settings": 0, "setting_kinds": 0, "logs": 0, "progress": 0,
    "thread_flags": 0, "warn": 0, "messages": 0,
    "keys": 1, "store": 1, "trust": 1, "pool": 1,
    "inductor": 2, "warm": 2, "vdev": 2, "events": 2,
    "cli": 3, "startup": 3,
}
# pcompile/__init__.py is the public face (`pcompile.install()`, `pcompile.warming()`,
# `pcompile.__file__`): it imports nothing at import time, so importing it is no dependency, and
# its lazy `install()` may reach any floor.
TOP = "__init__"


def _package_of(module: str) -> str | None:
    """`pcompile.store.tiered` -> `store`; `pcompile.errors` -> `errors`; `pcompile` -> `__init__`."""
    parts = module.split(".")
    if parts[0] != "pcompile":
        return None
    return parts[1] if len(parts) > 1 else TOP


def _module_name(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(node: ast.ImportFrom, module: str, is_pkg: bool) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        parts = module.split(".")
        if not is_pkg:
            parts = parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    if node.module is None:  # `from . import a, b` / `from pcompile import x`
        return [f"{base}.{a.name}" for a in node.names]
    return [base]


def _typing_only(tree: ast.AST) -> set[int]:
    """ids of the nodes under `if TYPE_CHECKING:` (annotations only: never imported at run time)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                out |= {id(n) for n in ast.walk(child)}
    return out


def _imports(path: Path, *, modules: bool = False, root: Path = ROOT) -> list[tuple[str, int]]:
    """(imported module, line) for every pcompile import in one file, wherever it sits (but under
    `if TYPE_CHECKING:`). `modules`: `from pkg import mod` names the module `pkg.mod` itself."""
    module = _module_name(path, root)
    tree = ast.parse(path.read_text(), str(path))
    skip = _typing_only(tree)
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            for base in _resolve(node, module, path.name == "__init__.py"):
                named = [f"{base}.{a.name}" for a in node.names] if modules and node.module is not None else []
                found += [(m, node.lineno) for m in named if _is_module(m, root)] or [(base, node.lineno)]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "find_spec", "__import__") and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.append((arg.value, node.lineno))
    return [(m, line) for m, line in found if m == "pcompile" or m.startswith("pcompile.")]


def _is_module(name: str, root: Path = ROOT) -> bool:
    rel = root.parent.joinpath(*name.split("."))
    return rel.with_suffix(".py").exists() or (rel / "__init__.py").exists()


def _edges() -> dict[tuple[str, str], list[str]]:
    """(from package, to package) -> the imports that make that edge, as `file:line -> module`."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        src = _package_of(_module_name(path))
        for target, line in _imports(path):
            dst = _package_of(target)
            if dst is None or dst == src:
                continue
            where = f"{path.relative_to(ROOT.parent)}:{line} imports {target}"
            edges.setdefault((src, dst), []).append(where)
    return edges


def test_every_package_has_a_floor():
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    packages |= {p.stem for p in ROOT.glob("*.py") if p.stem != TOP}
    missing = sorted(packages - FLOORS.keys())
    assert not missing, f"give these packages a floor in tests/test_import_graph.py FLOORS: {missing}"


def test_no_upward_import():
    bad = []
    for (src, dst), where in _edges().items():
        if TOP in (src, dst):
            continue
        if FLOORS.get(src, 99) < FLOORS.get(dst, 99):
            bad += [f"{w} (floor {FLOORS[src]} `{src}` -> floor {FLOORS[dst]} `{dst}`)" for w in where]
    assert not bad, "upward imports (invert them: the higher layer installs a callback):\n" + "\n".join(bad)


def test_no_cycle_between_packages():
    graph: dict[str, set[str]] = {}
    edges = _edges()
    for src, dst in edges:
        if TOP not in (src, dst):
            graph.setdefault(src, set()).add(dst)
    cycles = []
    for (src, dst), where in edges.items():
        if TOP in (src, dst):
            continue
        # does dst reach src?
        seen, todo = set(), [dst]
        while todo:
            node = todo.pop()
            if node == src:
                cycles.append(f"{src} -> {dst} closes a cycle: {where[0]}")
                break
            if node not in seen:
                seen.add(node)
                todo += graph.get(node, ())
    assert not cycles, "import cycles between packages:\n" + "\n".join(sorted(cycles))


def _module_graph(root: Path = ROOT) -> dict[str, dict[str, str]]:
    """module -> {imported module of the same package: `file:line`}. A package's __init__ is left
    out as a target: importing `pkg.mod` runs it, which is no dependency of `mod` on its siblings."""
    graph: dict[str, dict[str, str]] = {}
    for path in sorted(root.rglob("*.py")):
        src = _module_name(path, root)
        pkg = _package_of(src)
        if pkg == TOP:
            continue
        out = graph.setdefault(src, {})
        for target, line in _imports(path, modules=True, root=root):
            if target != src and _package_of(target) == pkg and _is_module(target, root) \
                    and not (root.parent / target.replace(".", "/") / "__init__.py").exists():
                out.setdefault(target, f"{path.relative_to(root.parent)}:{line}")
    return graph


def _module_cycles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(graph.get(child, ()))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_cycle_between_modules_of_one_package():
    """Inside a package too: a module that imports (even inside a function) one that imports it
    back is one job split in two, or a callback that should be handed in (inductor/features.py
    hands the hooks to a feature's install() rather than have it import them)."""
    graph = _module_graph()
    cycles = []
    for comp in _module_cycles(graph):
        members = set(comp)
        where = [f"  {src} -> {dst} ({at})" for src in comp for dst, at in graph[src].items() if dst in members]
        cycles.append(" <-> ".join(comp) + ":\n" + "\n".join(where))
    assert not cycles, "import cycles between modules of one package:\n" + "\n".join(cycles)


def _probe_package(tmp_path: Path) -> Path:
    """A throwaway `pcompile` tree with a `store` package, outside the real one (nothing is
    written into the source tree, where a concurrent test run or an import could see it)."""
    root = tmp_path / "pcompile"
    (root / "store").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "store" / "__init__.py").write_text("")
    return root


def test_the_module_graph_finds_a_cycle(tmp_path):
    """A circle made on purpose (two modules of one package importing each other, one inside a
    function) is found; without this the test above could pass by seeing nothing."""
    root = _probe_package(tmp_path)
    (root / "store" / "_cycle_probe_a.py").write_text("from pcompile.store import _cycle_probe_b\n")
    (root / "store" / "_cycle_probe_b.py").write_text("def f():\n    from pcompile.store import _cycle_probe_a\n")
    comps = _module_cycles(_module_graph(root))
    assert ["pcompile.store._cycle_probe_a", "pcompile.store._cycle_probe_b"] in comps


def test_no_module_over_500_lines():
    big = [f"{p.relative_to(ROOT.parent)}: {n} lines"
           for p in sorted(ROOT.rglob("*.py"))
           if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert not big, f"modules over {MAX_LINES} lines (split them by job):\n" + "\n".join(big)


def test_the_graph_sees_function_level_and_string_imports(tmp_path):
    """The parser finds each import form; without this the tests above could pass by seeing nothing."""
    root = _probe_package(tmp_path)
    mod = root / "store" / "_import_graph_probe.py"
    mod.write_text(
        "import importlib\n"
        "def f():\n"
        "    from pcompile.inductor import hooks\n"
        "    from ..cli import main\n"
        "    importlib.import_module('pcompile.warm.child')\n"
        "    importlib.util.find_spec('pcompile.events')\n"
    )
    found = {m for m, _ in _imports(mod, root=root)}
    assert found == {"pcompile.inductor", "pcompile.cli", "pcompile.warm.child", "pcompile.events"}
    assert {_package_of(m) for m in found} == {"inductor", "cli", "warm", "events"}
