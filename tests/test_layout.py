"""The shape of the code that review alone does not keep: no import circles,
no module reaching into another's private names, no function past 80 lines.

Why it exists: these are the rules of docs/design.md ("The layout") and
STYLE.md that a change can break without any behaviour changing, so no
other test would notice.  Each is measured on the source as text (an AST
walk), the way the rule is stated:

- an import circle counts every module-level import, those under
  `if TYPE_CHECKING:` included (a circle hidden there is still a coupling),
  in src/purelink and in bench/;
- a private name is one with a leading underscore; a module may use its own
  (any class of the module may touch another's), a class those of its bases
  (`self._x`, as ruff's SLF001 counts it), import a private *module* of its
  package (`from .. import _address`), and call what the standard library
  spells with an underscore (`os._exit`), but not read, call or import a
  private name another module of the product defines (bench/'s profilers
  may: they time the link's stages by its insides);
- a function is its lines from `def` to its last line, decorators aside.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[1]
SRC = CHECKOUT / "src"
LONGEST = 80  # lines a function may have (STYLE.md, "Small files, small functions")


def _modules(root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """Every module of `package` under `root`: name -> (file, is a package).
    A compiled module counts by its stub (`_speedups.pyi`): what the code
    imports from it for typing is a module of its own, not the package."""
    found = {}
    stubs = [p for p in (root / package).rglob("*.pyi") if not p.with_suffix(".py").exists()]
    for path in sorted([*(root / package).rglob("*.py"), *stubs]):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if "tests" in parts:
            continue
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)
    return found


def _module_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports run when the module loads, and those under `if TYPE_CHECKING:` or `try:`."""
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            todo += node.body + node.orelse
        elif isinstance(node, ast.Try):
            todo += node.body + node.orelse + node.finalbody
            for handler in node.handlers:
                todo += handler.body


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _graph(modules: dict[str, tuple[Path, bool]]) -> dict[str, set[str]]:
    """module -> the project's modules it imports at module level."""

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, is_package) in modules.items():
        for node in _module_level_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _absolute(name, is_package, node)
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            for target in targets:
                found = known(target)
                if found is not None and found != name:
                    graph[name].add(found)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


@pytest.mark.parametrize(("root", "package"), [(SRC, "purelink"), (CHECKOUT, "bench")])
def test_no_import_circles(root: Path, package: str) -> None:
    assert _circles(_graph(_modules(root, package))) == []


def test_the_circle_finder_finds_a_circle_hidden_under_type_checking(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "__init__.py").write_text("")
    (tmp_path / "p" / "a.py").write_text("from .b import B\n")
    (tmp_path / "p" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n"
    )
    (tmp_path / "p" / "c.py").write_text("from . import a\n")
    assert _circles(_graph(_modules(tmp_path, "p"))) == [["p.a", "p.b"]]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_names(tree: ast.Module) -> set[str]:
    """The private names a module defines: its functions, classes, attributes it
    assigns (`x._y = ...`, `self._y: T`), class-level names and __slots__."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # __slots__ entries, namedtuple fields
    return {name for name in names if _private(name)}


def _foreign_modules(tree: ast.Module) -> set[str]:
    """Local names bound to modules that are not the project's (`import os`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] not in ("purelink", "bench"):
                    names.add(alias.asname or alias.name.split(".")[0])
    return names


def _reaches(
    path: Path, module: str, modules: dict[str, tuple[Path, bool]], root: Path
) -> list[str]:
    """Where the module at `path` reads or imports another module's private name."""
    tree = ast.parse(path.read_text())
    own = _own_names(tree)
    foreign = _foreign_modules(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own:
            value = node.value
            if isinstance(value, ast.Name) and value.id in {"self", "cls", *foreign}:
                continue  # a class's own (inherited) names; the standard library's
            found.append(f"{path.relative_to(root)}:{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.level:
            base = _absolute(module, modules[module][1], node)
            for alias in node.names:
                if _private(alias.name) and f"{base}.{alias.name}" not in modules:
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {alias.name}")
    return found


def test_no_module_reaches_into_another_modules_private_names() -> None:
    """In the product (bench/'s profilers time the link's stages by its insides)."""
    modules = _modules(SRC, "purelink")
    found = [
        line for name, (path, _) in modules.items() for line in _reaches(path, name, modules, SRC)
    ]
    assert found == []


def test_the_private_check_tells_own_names_from_another_modules(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "__init__.py").write_text("")
    (tmp_path / "p" / "_util.py").write_text("def _helper(): pass\nclass T:\n    _n = 0\n")
    code = (
        "import os\nfrom . import _util\nfrom ._util import _helper\n"
        "class A:\n    def __init__(self):\n        self._x = 1\n"
        "def f(a, t):\n    os._exit(a._x)\n    return t._n\n"
        "class B(A):\n    def g(self):\n        return self._y\n"
    )
    (tmp_path / "p" / "m.py").write_text(code)
    found = _reaches(tmp_path / "p" / "m.py", "p.m", _modules(tmp_path, "p"), tmp_path)
    assert found == ["p/m.py:3: _helper", "p/m.py:9: ._n"]


def test_no_function_is_longer_than_80_lines() -> None:
    long = []
    for path in sorted((SRC / "purelink").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > LONGEST:
                    long.append(f"{path.relative_to(CHECKOUT)}:{node.lineno} {node.name}: {lines}")
    assert long == []
