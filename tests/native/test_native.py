"""purelink.native picks the compiled core or pure Python, and says which and why.

Why: the two paths must be selectable (PURELINK_NO_EXTENSIONS) and a build
that silently lost its compiled core must fail CI: .ci/run sets
PURELINK_EXPECT_COMPILED=1 where it expects one, and the test below then
fails when the core did not load.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from purelink import native

PROBE = "from purelink import native; print(native.IMPLEMENTATION, '|', native.reason)"


def _probe(**env: str) -> str:
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", PROBE],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.strip()


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
