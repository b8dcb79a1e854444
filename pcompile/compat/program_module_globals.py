"""Modules Dynamo's bytecode loads through globals it installs itself: recorded in the program.

Why: when a traced frame's bytecode must load a module that the frame's globals do not hold by its
own name (transformers' output-capturing wrapper reaches `collections` through a closure), Dynamo's
`PyCodegen.create_load_python_module` installs it as `___module_<name>_<id>_c<compile id>` in the
frame's globals, and nothing tells the program. A restart that ran the program raised
`NameError: name '___module_collections_..._c0' is not defined` inside the model's forward: a job
that runs without programs failed with them (torch 2.15.0 with transformers 5.17, and 2.14.1 once
wrapped functions were kept, compat/program_wrapped_functions.py). The global is recorded as one of
the frame's import sources, which torch installs with the program; a module that cannot be
imported by its name leaves the frame out of the program (torch's own bypass).

Touched (torch 2.11.0, 2.14.1 and 2.15.0 read: the same method in all three):
`torch._dynamo.codegen.PyCodegen.create_load_python_module` (returns the LOAD_GLOBAL instruction,
its `argval` the global's name), `tx.output.package` (`add_import_source`) and
`tx.output.bypass_package`.
"""
from __future__ import annotations

import sys
from typing import Any, Callable

from pcompile.compat import require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}

_PREFIX = "___module_"
_saved: dict[str, Any] = {}


def check() -> None:
    from torch._dynamo import codegen, output_graph

    require_attr(codegen.PyCodegen, "create_load_python_module", "torch._dynamo.codegen.PyCodegen")
    require_attr(output_graph.OutputGraph, "bypass_package", "torch._dynamo.output_graph.OutputGraph")


def record(output: Any, name: str, module: Any) -> None:
    """Tell `output`'s package (if any) that global `name` is `module`, or leave the frame out."""
    package = getattr(output, "package", None)
    if package is None or not name.startswith(_PREFIX):
        return
    module_name = getattr(module, "__name__", None)
    if isinstance(module_name, str) and sys.modules.get(module_name) is module:
        package.add_import_source(name, module_name)
    else:
        output.bypass_package(f"the frame loads module {module_name!r}, which cannot be imported by name")


def install(on_error: Callable[[str], None] = lambda why: None) -> None:
    """Patch the codegen method (idempotent)."""
    if _saved:
        return
    from torch._dynamo import codegen

    original = codegen.PyCodegen.create_load_python_module

    def create_load_python_module(self: Any, mod: Any) -> Any:
        instruction = original(self, mod)
        try:
            record(self.tx.output, str(getattr(instruction, "argval", "")), mod)
        except Exception as exc:  # never fails a compile: the program may lack the frame
            on_error(f"{type(exc).__name__}: {exc}")
        return instruction

    _saved["load"] = original
    codegen.PyCodegen.create_load_python_module = create_load_python_module  # type: ignore[method-assign]


def uninstall() -> None:
    if "load" in _saved:
        from torch._dynamo import codegen

        codegen.PyCodegen.create_load_python_module = _saved.pop("load")  # type: ignore[method-assign]
