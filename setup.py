"""The wheel also holds the benchmark suite: bench/ as `purelink/bench/`, without its tests.

Why a setup.py: `purelink bench` is a verb of the installed command, so a
plain `pip install .` must ship the suite; its scripts stay in bench/ at the
top of the checkout (`python -m bench.queue` there, as the docs say).  The
build step copies them in, so the source tree and its editable installs stay
plain (an editable install runs them from the checkout's bench/, where
`purelink bench` looks when `purelink.bench` is not installed).  Everything
else about the build is in pyproject.toml; MANIFEST.in puts bench/ in the sdist.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


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


setup(cmdclass={"build_py": BuildPyWithBench})
