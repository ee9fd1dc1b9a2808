"""Check what `python -m build` made, as a user and a packager rely on it.

Usage (from the repository root, by .ci/run): python .ci/check_dist.py DIST_DIR

- one wheel and one sdist, of the version in src/purelink/__init__.py;
- the wheel holds the package and its metadata only: every module of
  src/purelink, py.typed (the package is typed), the license file, the
  `purelink` command, the benchmark suite as purelink/bench/ (every module
  of bench/ and its subpackages, such as bench/paths/, for `purelink
  bench`), and no tests (not bench/tests/ either) or build leftovers;
- its metadata says what pyproject.toml promises: Requires-Python, the
  license expression, the runtime dependencies, a classifier per supported
  Python (3.11 to 3.14), the README as its description;
- the sdist holds every file git tracks (but .gitignore), so that an unpacked
  sdist runs `pip install '.[test]' && pytest` like a clone.
Prints one line per problem and exits 1 if there is any.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

PYTHONS = ("3.11", "3.12", "3.13", "3.14")


def version() -> str:
    tree = ast.parse(Path("src/purelink/__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == [
            "__version__"
        ]:
            return str(ast.literal_eval(node.value))
    raise SystemExit("check_dist: no __version__ in src/purelink/__init__.py")


def _names(requirements: list[str]) -> set[str]:
    """The project names of requirements such as "crc32c>=2.3"."""
    return {re.split(r"[^A-Za-z0-9._-]", r.strip(), maxsplit=1)[0].lower() for r in requirements}


def check_wheel(path: Path, v: str) -> list[str]:
    problems = []
    with zipfile.ZipFile(path) as whl:
        names = set(whl.namelist())
        info = f"purelink-{v}.dist-info"
        meta = Parser().parsestr(whl.read(f"{info}/METADATA").decode())
        entry_points = whl.read(f"{info}/entry_points.txt").decode()
    modules = {
        p.relative_to("src").as_posix()
        for p in Path("src/purelink").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    bench = {
        f"purelink/bench/{p.relative_to('bench').as_posix()}"
        for p in Path("bench").rglob("*.py")
        if "__pycache__" not in p.parts
    }
    tests = {n for n in bench if n.startswith("purelink/bench/tests/")}
    wanted = modules | (bench - tests) | {"purelink/py.typed", f"{info}/licenses/LICENSE"}
    problems += [f"wheel: {name} is missing" for name in sorted(wanted - names)]
    stray = [n for n in names if not n.startswith(("purelink/", f"{info}/"))]
    stray += [n for n in names if n.startswith(("purelink/bench/tests/", "purelink/tests/"))]
    stray += [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    problems += [f"wheel: {name} does not belong in it" for name in sorted(stray)]
    project = tomllib.loads(Path("pyproject.toml").read_text())["project"]
    expect = {
        "Name": "purelink",
        "Version": v,
        "Requires-Python": project["requires-python"],
        "License-Expression": project["license"],
        "License-File": "LICENSE",
        "Description-Content-Type": "text/markdown",
    }
    for field, value in expect.items():
        if meta.get(field) != value:
            problems.append(f"wheel METADATA: {field} is {meta.get(field)!r}, not {value!r}")
    classifiers = meta.get_all("Classifier") or []
    for py in PYTHONS:
        if f"Programming Language :: Python :: {py}" not in classifiers:
            problems.append(f"wheel METADATA: no classifier for Python {py}")
    runtime = [d for d in meta.get_all("Requires-Dist") or [] if "extra ==" not in d]
    if _names(runtime) != _names(project["dependencies"]):
        problems.append(
            f"wheel METADATA: runtime dependencies {runtime}, pyproject.toml "
            f"{project['dependencies']}"
        )
    if "# purelink" not in meta.get_payload():
        problems.append("wheel METADATA: the README is not the description")
    command = f"purelink = {project['scripts']['purelink']}"  # as pyproject.toml names it
    if command not in entry_points:
        problems.append(f"wheel: no `{command}` in entry_points.txt")
    return problems


def check_sdist(path: Path) -> list[str]:
    with tarfile.open(path) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    tracked = subprocess.run(
        ["git", "ls-files"], capture_output=True, text=True, check=True
    ).stdout.split()
    wanted = {*tracked, "PKG-INFO"} - {".gitignore"}
    return [f"sdist: {name} is missing" for name in sorted(wanted - names)]


def main() -> int:
    dist = Path(sys.argv[1])
    v = version()
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    want_wheel, want_sdist = f"purelink-{v}-py3-none-any.whl", f"purelink-{v}.tar.gz"
    if [w.name for w in wheels] != [want_wheel] or [s.name for s in sdists] != [want_sdist]:
        print(
            f"check_dist: want {want_wheel} and {want_sdist} in {dist}, found "
            f"{[p.name for p in (*wheels, *sdists)]}"
        )
        return 1
    problems = check_wheel(wheels[0], v) + check_sdist(sdists[0])
    for problem in problems:
        print(f"check_dist: {problem}")
    if not problems:
        print(f"check_dist: {want_wheel} and {want_sdist} hold what they should")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
