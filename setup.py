"""The wheel also holds the benchmark suite: bench/*.py as `purelink/bench/`.

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


class BuildPyWithBench(build_py):
    """build_py, plus bench/*.py copied to purelink/bench/ (not for editable installs)."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "purelink" / "bench"
        self.mkpath(str(target))
        for source in sorted(Path(__file__).parent.joinpath("bench").glob("*.py")):
            self.copy_file(str(source), str(target / source.name))


setup(cmdclass={"build_py": BuildPyWithBench})
