"""What an installed purelink says about itself: its version and its metadata.

Why it exists: a user checks `purelink --version` and pip's metadata before
trusting an install, and .ci/run tests every interpreter the machine has.
The classifiers must name each Python version the package is tested on: the
test of that runs on each of them, so a new interpreter on the machine that
is not declared fails here.  `--version` reads `purelink.__version__` (the
one source setuptools reads too), so it costs no package-metadata import, and
says which implementation runs (`purelink.native`: compiled core or pure Python).
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import purelink
from purelink import native


def test_version_flag_prints_the_installed_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "purelink", "--version"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    want = f"purelink {purelink.__version__} ({native.IMPLEMENTATION})\n"
    assert out.stdout.decode() == want
    assert importlib.metadata.version("purelink") == purelink.__version__


def test_version_flag_loads_no_metadata_and_no_listener() -> None:
    code = (
        "import json, sys\n"
        "from purelink import cli\n"
        "try:\n"
        "    cli.main(['--version'])\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "print(json.dumps([code, sorted(sys.modules)]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60, check=True)
    code, modules = json.loads(out.stdout.decode().splitlines()[-1])
    assert code == 0
    assert not {"importlib.metadata", "purelink.listener.listener", "purelink.store.store"} & set(
        modules
    )


def test_the_running_python_is_a_declared_one() -> None:
    meta = importlib.metadata.metadata("purelink")
    classifiers = meta.get_all("Classifier") or []
    version = "%d.%d" % sys.version_info[:2]
    assert f"Programming Language :: Python :: {version}" in classifiers
    declared = sorted(
        c.rsplit(" ", 1)[1]
        for c in classifiers
        if c.startswith("Programming Language :: Python :: 3.")
    )
    assert declared == ["3.11", "3.12", "3.13", "3.14"]
    assert meta["Requires-Python"] == ">=%s" % declared[0]
    assert meta["License-Expression"] == "MIT"
    assert "LICENSE" in (meta.get_all("License-File") or [])
