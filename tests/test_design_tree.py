"""docs/design.md's package tree is the tree of src/purelink.

Why it exists: the tree in design.md is the map a reader starts from, and a
map that names a file that is gone (or leaves out a new one) misleads.  This
test reads the fenced block between `<!-- tree -->` and `<!-- /tree -->`
(one entry a line, two spaces of indent per level, a name and a few words:
`name/` for a package, whose `__init__.py` that line stands for, `name.py`
for a module) and fails, naming each one, when a module or package was
added, removed or renamed under src/purelink and the tree was not.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
PACKAGE = ROOT / "src" / "purelink"

_BLOCK = re.compile(r"<!-- tree -->\s*```[^\n]*\n(.*?)```\s*<!-- /tree -->", re.DOTALL)


def documented_tree(text: str) -> tuple[set[str], list[str]]:
    """The paths the tree names (relative to purelink/, packages ending in
    '/'), and the problems of its form (an entry without words, a bad indent)."""
    match = _BLOCK.search(text)
    if match is None:
        return set(), ["no ``` block between <!-- tree --> and <!-- /tree --> markers"]
    paths: set[str] = set()
    problems: list[str] = []
    stack: list[tuple[int, str]] = []  # (indent, package path) of the open packages
    lines = [line for line in match.group(1).splitlines() if line.strip()]
    root = lines[0].split()[0] if lines else ""
    if root != "purelink/":
        problems.append(f"the tree's first line names {root!r}, not 'purelink/'")
    for line in lines[1:]:
        indent = len(line) - len(line.lstrip(" "))
        name, *words = line.split()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if indent != 2 * (len(stack) + 1):
            problems.append(f"{name!r}: indented {indent} spaces, not {2 * (len(stack) + 1)}")
        if not words:
            problems.append(f"{name!r}: no words saying what it is")
        parent = stack[-1][1] if stack else ""
        path = parent + name
        if path in paths:
            problems.append(f"{path!r}: listed twice")
        paths.add(path)
        if name.endswith("/"):
            stack.append((indent, path))
    return paths, problems


def actual_tree(package: Path) -> set[str]:
    """Every module and package under `package`: a directory that holds .py
    files is a package (with or without its __init__.py)."""
    paths: set[str] = set()
    for module in package.rglob("*.py"):
        relative = module.relative_to(package)
        if "__pycache__" in relative.parts:
            continue
        for depth in range(1, len(relative.parts)):
            paths.add("/".join(relative.parts[:depth]) + "/")
        if module.name != "__init__.py":
            paths.add(relative.as_posix())
    return paths


def test_the_tree_in_design_md_is_the_tree_of_src() -> None:
    documented, problems = documented_tree(DESIGN.read_text(encoding="utf-8"))
    assert not problems, "docs/design.md's tree: " + "; ".join(problems)
    actual = actual_tree(PACKAGE)
    missing = sorted(actual - documented)
    extra = sorted(documented - actual)
    assert not missing and not extra, (
        "docs/design.md's tree (between <!-- tree --> and <!-- /tree -->) differs from "
        f"src/purelink: missing from it {missing or 'nothing'}; "
        f"named there but not in src/purelink {extra or 'nothing'}"
    )


def test_the_check_names_what_differs() -> None:
    text = (
        "<!-- tree -->\n```\npurelink/  the package\n  a.py  one\n  sub/  a package\n"
        "    b.py  two\n  c.py\n```\n<!-- /tree -->\n"
    )
    documented, problems = documented_tree(text)
    assert documented == {"a.py", "sub/", "sub/b.py", "c.py"}
    assert problems == ["'c.py': no words saying what it is"]
