"""The wheel also holds the benchmark suite: bench/ as `purelink/bench/`, without its tests.

Why a setup.py: `purelink bench` is a verb of the installed command, so a
plain `pip install .` must ship the suite; its scripts stay in bench/ at the
top of the checkout (`python -m bench.queue` there, as the docs say).  The
build step copies them in, so the source tree and its editable installs stay
plain (an editable install runs them from the checkout's bench/, where
`purelink bench` looks when `purelink.bench` is not installed).  Everything
else about the build is in pyproject.toml; MANIFEST.in puts bench/ in the sdist.

It also builds the compiled core, `purelink._speedups`, from src/speedups/*.c
(docs/performance.md, "The compiled core"): with the limited API of CPython
3.11, so one binary serves 3.11 and later (an abi3 wheel), and optional, so
that where no compiler works `pip install .` still installs the package, which
then runs its pure-Python path.  It is not built for a free-threaded CPython
(not audited for it yet), nor when PURELINK_NO_EXTENSIONS is set at build time.
"""

import os
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

LIMITED_API = 0x030B0000
"""CPython 3.11's limited API: the oldest version the project supports."""


def bench_modules(bench: Path) -> list[Path]:
    """Every module of the suite, its subpackages (bench/paths/) included, relative
    to bench/: not bench/tests/ (the suite's own tests, for a checkout)."""
    return sorted(
        p.relative_to(bench)
        for p in bench.rglob("*.py")
        if "__pycache__" not in p.parts and p.relative_to(bench).parts[0] != "tests"
    )


class BuildPyWithBench(build_py):
    """build_py, plus bench/ copied to purelink/bench/ (not for editable installs)."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        bench = Path(__file__).parent / "bench"
        target = Path(self.build_lib) / "purelink" / "bench"
        for module in bench_modules(bench):
            self.mkpath(str((target / module).parent))
            self.copy_file(str(bench / module), str(target / module))


def extensions() -> list[Extension]:
    """The compiled core, where it should be built (see the module header)."""
    if os.environ.get("PURELINK_NO_EXTENSIONS") or sysconfig.get_config_var("Py_GIL_DISABLED"):
        return []
    sources = sorted(str(p.as_posix()) for p in Path("src/speedups").glob("*.c"))
    return [
        Extension(
            "purelink._speedups",
            sources=sources,
            depends=[str(p.as_posix()) for p in Path("src/speedups").glob("*.h")],
            define_macros=[("Py_LIMITED_API", hex(LIMITED_API))],
            py_limited_api=True,
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Werror=implicit"],
            optional=True,
        )
    ]


ext_modules = extensions()
setup(
    cmdclass={"build_py": BuildPyWithBench},
    ext_modules=ext_modules,
    options={"bdist_wheel": {"py_limited_api": "cp311"}} if ext_modules else {},
)
