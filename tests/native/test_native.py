"""purelink.native picks the compiled core or pure Python, and says which and why.

Why: the two paths must be selectable (PURELINK_NO_EXTENSIONS) and a build
that silently lost its compiled core must fail CI: .ci/run sets
PURELINK_EXPECT_COMPILED=1 where it expects one, and the test below then
fails when the core did not load.  `purelink --version` and both `stats()`
say which path runs, in the same words as `native.IMPLEMENTATION`.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import purelink
from purelink import native

PROBE = "from purelink import native; print(native.IMPLEMENTATION, '|', native.reason)"

STATS = """
import sys, tempfile
import purelink
with tempfile.TemporaryDirectory() as data:
    with purelink.Listener(data, udp="127.0.0.1:0") as listener:
        host, port = listener.udp_address
        with purelink.connect(f"udp://{host}:{port}", stream="s", timeout=5) as link:
            link.queue(b"one")
            assert link.wait_stored(timeout=10)
            print(link.stats().implementation, "|", listener.stats().implementation)
"""


def _probe(code: str = PROBE, **env: str) -> str:
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.strip()


def test_version_and_stats_say_which_path_runs(tmp_path: Path) -> None:
    version = _probe("from purelink.cli import main; main(['--version'])")
    assert version == f"purelink {purelink.__version__} ({native.IMPLEMENTATION})"
    assert native.IMPLEMENTATION in ("compiled core", "pure Python")
    with purelink.Listener(tmp_path / "data", udp="127.0.0.1:0") as listener:
        host, port = listener.udp_address or ("", 0)
        with purelink.connect(f"udp://{host}:{port}", stream="s", timeout=5) as link:
            link.queue(b"one")
            assert link.wait_stored(timeout=10)
            assert link.stats().implementation == native.IMPLEMENTATION
            assert listener.stats().implementation == native.IMPLEMENTATION


def test_forced_pure_python_shows_in_version_and_stats() -> None:
    version = _probe(
        "from purelink.cli import main; main(['--version'])", PURELINK_NO_EXTENSIONS="1"
    )
    assert version == f"purelink {purelink.__version__} (pure Python)"
    assert _probe(STATS, PURELINK_NO_EXTENSIONS="1") == "pure Python | pure Python"


def test_the_variable_forces_pure_python() -> None:
    assert _probe(PURELINK_NO_EXTENSIONS="1") == "pure Python | PURELINK_NO_EXTENSIONS=1"


def test_zero_or_empty_does_not_force_it() -> None:
    built = importlib.util.find_spec("purelink._speedups") is not None
    want = "compiled core" if built else "pure Python"
    assert _probe(PURELINK_NO_EXTENSIONS="0").startswith(want)
    assert _probe(PURELINK_NO_EXTENSIONS="").startswith(want)


def test_a_part_is_there_only_if_the_core_has_it() -> None:
    assert native.part("no such part") is None
    if native.compiled is None:
        assert native.part("ring") is None


@pytest.mark.skipif(
    os.environ.get("PURELINK_EXPECT_COMPILED", "") in ("", "0"),
    reason="this run does not expect the compiled core (PURELINK_EXPECT_COMPILED unset)",
)
def test_the_compiled_core_loaded_where_it_is_expected() -> None:
    assert native.COMPILED, f"purelink runs pure Python: {native.reason}"


def test_without_the_extension_the_import_is_clean_under_warnings_as_errors() -> None:
    """What a free-threaded CPython gets (setup.py builds no extension there) and an
    install without a compiler: no `_speedups` at all; `-W error` must still import."""
    absent = "import sys; sys.modules['purelink._speedups'] = None\n"  # import raises
    out = _probe(absent + PROBE, PURELINK_NO_EXTENSIONS="")
    assert out.startswith("pure Python | the compiled core is not built ("), out
    imports = "import purelink, purelink.link, purelink.listener; print('ok')"
    assert _probe(absent + imports, PURELINK_NO_EXTENSIONS="") == "ok"
