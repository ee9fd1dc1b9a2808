"""Check what `python -m build` made, as a user and a packager rely on it.

Usage (from the repository root, by .ci/run):
  python .ci/check_dist.py [--without-compiler] DIST_DIR

- one wheel and one sdist, of the version in src/purelink/__init__.py;
- the wheel is a platform wheel for CPython 3.11 and later, with the stable
  ABI (purelink-V-cp311-abi3-PLATFORM.whl: linux_x86_64 here, manylinux_* or
  musllinux_* from cibuildwheel), holding the compiled core as
  purelink/_speedups.abi3.so and no C source (the sdist carries that);
  `--without-compiler` says the build had no C compiler: then the wheel may
  hold no extension, and no `.so` at all;
- the wheel holds the package and its metadata only: every module of
  src/purelink, py.typed (the package is typed) and the compiled core's stub
  (_speedups.pyi), the license file, the
  `purelink` command, the benchmark suite as purelink/bench/ (every module
  of bench/ and its subpackages, such as bench/paths/, for `purelink
  bench`), and no tests (not bench/tests/ either) or build leftovers;
- its metadata says what pyproject.toml promises: Requires-Python, the
  license expression, the runtime dependencies, a classifier per supported
  Python (3.11 to 3.14), the README as its description;
- the sdist holds every file git tracks (but .gitignore), so that an unpacked
  sdist runs `pip install '.[test]' && pytest` like a clone; among them the
  compiled core's C source, src/speedups/*.c and *.h, which it builds (.ci/run
  installs it and checks that `purelink --version` says compiled core).
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

WHEEL_NAME = re.compile(
    r"purelink-(?P<version>[^-]+)-cp311-abi3-(?P<platform>linux_\w+|manylinux\w+|musllinux\w+)\.whl"
)
"""A platform wheel for CPython >= 3.11, stable ABI (setup.py: py_limited_api cp311)."""

EXTENSION = "purelink/_speedups.abi3.so"


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


def check_compiled(names: set[str], wheel_info: str, platform: str, compiler: bool) -> list[str]:
    """The compiled core in the wheel: one abi3 extension, no C source, tagged as such."""
    problems = []
    objects = sorted(n for n in names if n.endswith(".so"))
    if compiler and objects != [EXTENSION]:
        problems.append(f"wheel: shared objects {objects}, want [{EXTENSION!r}]")
    if not compiler and objects not in ([], [EXTENSION]):
        problems.append(f"wheel: shared objects {objects}, want none or [{EXTENSION!r}]")
    sources = sorted(n for n in names if n.endswith((".c", ".h")))
    problems += [f"wheel: {name} is C source (the sdist carries it)" for name in sources]
    wheel = Parser().parsestr(wheel_info)
    if wheel.get("Root-Is-Purelib") != "false":
        problems.append("wheel WHEEL: Root-Is-Purelib is not false (a platform wheel)")
    if wheel.get_all("Tag") != [f"cp311-abi3-{platform}"]:
        problems.append(f"wheel WHEEL: tags {wheel.get_all('Tag')}, not cp311-abi3-{platform}")
    return problems


def check_wheel(path: Path, v: str, compiler: bool = True) -> list[str]:
    problems = []
    found = WHEEL_NAME.fullmatch(path.name)
    platform = found.group("platform") if found else "?"
    with zipfile.ZipFile(path) as whl:
        names = set(whl.namelist())
        info = f"purelink-{v}.dist-info"
        meta = Parser().parsestr(whl.read(f"{info}/METADATA").decode())
        entry_points = whl.read(f"{info}/entry_points.txt").decode()
        problems += check_compiled(names, whl.read(f"{info}/WHEEL").decode(), platform, compiler)
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
    wanted = modules | (bench - tests) | {"purelink/py.typed", "purelink/_speedups.pyi"}
    wanted.add(f"{info}/licenses/LICENSE")
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
    problems = [f"sdist: {name} is missing" for name in sorted(wanted - names)]
    c_source = {n for n in names if n.startswith("src/speedups/") and n.endswith((".c", ".h"))}
    on_disk = {p.as_posix() for p in Path("src/speedups").glob("*.[ch]")}
    if not c_source or not {"src/speedups/module.c", "src/speedups/speedups.h"} <= c_source:
        problems.append("sdist: the compiled core's C source (src/speedups/*.c, *.h) is missing")
    problems += [f"sdist: {name} is missing" for name in sorted(on_disk - c_source - wanted)]
    return problems


def main() -> int:
    args = sys.argv[1:]
    compiler = "--without-compiler" not in args
    dist = Path(next(a for a in args if a != "--without-compiler"))
    v = version()
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    want_wheel, want_sdist = f"purelink-{v}-cp311-abi3-PLATFORM.whl", f"purelink-{v}.tar.gz"
    named = [w for w in wheels if (m := WHEEL_NAME.fullmatch(w.name)) and m["version"] == v]
    if len(wheels) != 1 or named != wheels or [s.name for s in sdists] != [want_sdist]:
        print(
            f"check_dist: want {want_wheel} and {want_sdist} in {dist}, found "
            f"{[p.name for p in (*wheels, *sdists)]}"
        )
        return 1
    problems = check_wheel(wheels[0], v, compiler) + check_sdist(sdists[0])
    for problem in problems:
        print(f"check_dist: {problem}")
    if not problems:
        print(f"check_dist: {wheels[0].name} and {want_sdist} hold what they should")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
