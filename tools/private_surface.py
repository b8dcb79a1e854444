"""List every private torch/triton name pcompile's package touches; write pcompile/compat/README.md.

    python tools/private_surface.py           # rewrite the table
    python tools/private_surface.py --check   # exit 1 if the committed table is stale (tests run this)

Why: the private surface is what breaks on a torch/triton upgrade. Keeping it in one generated
table, each name with the module that owns it and the versions that module was read against,
makes the surface visible and a new touch outside `pcompile/compat/` a test failure
(tests/test_private_surface.py).

What counts as private: a torch name with a component starting with "_" (not a dunder), and any
triton name outside triton's documented API (PUBLIC_TRITON). Found statically, without importing
torch: dotted references through `import`/`from` aliases, `getattr`/`hasattr`/`setattr`/
`require_attr` with a literal name, and string literals or ("module", "attr") pairs naming a
private dotted path. The versions come from each owning module's `CHECKED` mapping.
"""
from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pcompile"
COMPAT = PACKAGE / "compat"
TABLE = COMPAT / "README.md"
ROOTS = ("torch", "triton")
#: triton's documented Python API (triton-lang.org "triton" and "triton.language" pages).
PUBLIC_TRITON = ("triton.jit", "triton.autotune", "triton.heuristics", "triton.Config", "triton.language",
                 "triton.testing", "triton.cdiv", "triton.next_power_of_2", "triton.__version__", "triton.__file__")
_ATTR_CALLS = {"getattr", "hasattr", "setattr", "delattr", "require_attr"}


def is_private(dotted: str) -> bool:
    parts = dotted.split(".")
    if parts[0] == "torch":
        return any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts[1:])
    if parts[0] == "triton":
        return len(parts) > 1 and not any(dotted == p or dotted.startswith(p + ".") for p in PUBLIC_TRITON)
    return False


def _is_dotted_path(text: str) -> bool:
    parts = text.split(".")
    return len(parts) > 1 and parts[0] in ROOTS and all(p.isidentifier() for p in parts)


@dataclass
class _Scan(ast.NodeVisitor):
    """Private dotted names used in one module, resolved through its import aliases."""

    aliases: dict[str, str] = field(default_factory=dict)
    found: set[str] = field(default_factory=set)

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if a.name.split(".")[0] in ROOTS:
                if a.asname:
                    self.aliases[a.asname] = a.name
                else:
                    self.aliases[a.name.split(".")[0]] = a.name.split(".")[0]
                self._add(a.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and node.level == 0 and node.module.split(".")[0] in ROOTS:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                self.aliases[a.asname or a.name] = full
                self._add(full)

    def _dotted(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self._dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            base = self._dotted(node.args[0])  # getattr(getattr(torch, "autograd"), "_x")
            return f"{base}.{node.args[1].value}" if base else None
        return None

    def _add(self, dotted: str | None) -> None:
        if not dotted:
            return
        parts = dotted.split(".")
        for i, part in enumerate(parts):  # pcompile's own marker attributes set on torch objects
            if part.startswith("_pcompile"):
                dotted = ".".join(parts[:i])
                break
        if is_private(dotted):
            self.found.add(dotted)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = self._dotted(node)
        if dotted:
            self._add(dotted)  # the longest chain; its prefixes are not listed separately
            return
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        fn = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
        if fn in _ATTR_CALLS and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                and isinstance(node.args[1].value, str):
            base = self._dotted(node.args[0])
            if base is None and fn == "require_attr" and len(node.args) >= 3 and isinstance(node.args[2], ast.Constant) \
                    and isinstance(node.args[2].value, str) and _is_dotted_path(node.args[2].value):
                base = node.args[2].value  # require_attr(obj, "name", "torch._x.y"): the where names obj
            if base:
                self._add(f"{base}.{node.args[1].value}")
        self.generic_visit(node)

    def visit_Tuple(self, node: ast.Tuple) -> None:
        elts = node.elts
        if len(elts) == 2 and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in elts) \
                and _is_dotted_path(elts[0].value) and elts[1].value.isidentifier():  # ("torch._x", "attr")
            self._add(f"{elts[0].value}.{elts[1].value}")
            return
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and _is_dotted_path(node.value):
            self._add(node.value)


def _docstring_free(tree: ast.Module) -> ast.Module:
    """Docstrings describe touches; they are not touches."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) \
                and isinstance(node.body[0].value.value, str):
            node.body[0] = ast.Pass()
    return tree


def _minimal(names: set[str]) -> list[str]:
    """Drop a name whose longer chain is also listed (torch._inductor.config when
    torch._inductor.config.fx_graph_cache is), keeping bare module imports that stand alone."""
    return sorted(n for n in names if not any(o != n and o.startswith(n + ".") for o in names))


def checked_versions(tree: ast.Module) -> dict[str, str]:
    """The module's `CHECKED = {"torch": "...", "triton": "..."}` literal, or {}."""
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == "CHECKED" and getattr(node, "value", None) is not None:
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return {}
            return {str(k): str(v) for k, v in value.items()}
    return {}


@dataclass(frozen=True)
class Row:
    name: str
    owner: str
    checked: str


def scan(package: Path = PACKAGE) -> list[Row]:
    rows: list[Row] = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        checked = checked_versions(tree)
        visitor = _Scan()
        visitor.visit(_docstring_free(tree))
        owner = path.relative_to(package.parent).as_posix()
        versions = "; ".join(f"{k} {v}" for k, v in sorted(checked.items())) or "(none recorded)"
        rows.extend(Row(name, owner, versions) for name in _minimal(visitor.found))
    return sorted(rows, key=lambda r: (r.owner, r.name))


def outside_compat(rows: list[Row]) -> list[Row]:
    compat = COMPAT.relative_to(ROOT).as_posix() + "/"
    return [r for r in rows if not r.owner.startswith(compat)]


def render(rows: list[Row]) -> str:
    owners = sorted({r.owner for r in rows})
    lines = [
        "# The private torch/triton surface",
        "",
        "Generated by `tools/private_surface.py` (do not edit; `tests/test_private_surface.py` fails when it is",
        "stale). Every private torch name (a component starting with `_`) and every triton name outside",
        "triton's documented API that pcompile's package touches, with the module that owns it and the",
        "versions that module's `CHECKED` says it was read against. Each module's docstring says why it",
        "needs the names and what it relies on; its test (`tests/test_compat_<module>.py`, or the test",
        "named in the docstring) fails when a version breaks it.",
        "",
        f"{len(rows)} names in {len(owners)} modules.",
        "",
        "| owner | checked against | private names |",
        "| --- | --- | --- |",
    ]
    for owner in owners:
        mine = [r for r in rows if r.owner == owner]
        names = "<br>".join(f"`{r.name}`" for r in mine)
        lines.append(f"| `{owner}` | {mine[0].checked} | {names} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the committed table differs")
    args = parser.parse_args(argv)
    text = render(scan())
    if args.check:
        if not TABLE.exists() or TABLE.read_text() != text:
            sys.stderr.write(f"{TABLE.relative_to(ROOT)} is stale: run python tools/private_surface.py\n")
            return 1
        return 0
    TABLE.write_text(text)
    print(f"wrote {TABLE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
