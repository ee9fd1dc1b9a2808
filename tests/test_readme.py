"""Every Python example in README.md runs as written, and the docs' copy-paste
examples are safe as they stand.

Each ```python block of the README runs in its own interpreter in an empty
directory (the examples start their own listener where they need one).  A
block that cannot run alone says so in the README, on the line before it:
`<!-- test_readme: not run (WHY) -->`; nothing is skipped silently.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import purelink
from purelink.protocol.keys import KeysFileError, parse_keys

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
NOT_RUN = re.compile(r"<!-- test_readme: not run \((?P<why>[^)]+)\) -->")
FENCE = re.compile(r"^```(?P<lang>\S*)\n(?P<code>.*?)^```\n", re.MULTILINE | re.DOTALL)


def python_blocks(text: str) -> list[tuple[int, str, str | None]]:
    """(line, code, why it is not run or None) of each ```python block."""
    found = []
    for match in FENCE.finditer(text):
        if match.group("lang") != "python":
            continue
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = NOT_RUN.fullmatch(before.strip())
        line = text.count("\n", 0, match.start()) + 1
        found.append((line, match.group("code"), marker.group("why") if marker else None))
    return found


BLOCKS = python_blocks(README.read_text())
RUN = [(line, code) for line, code, why in BLOCKS if why is None]


def test_the_readme_has_examples_to_run_and_says_why_of_the_others() -> None:
    assert len(RUN) >= 3, BLOCKS
    # a marker not right before a python block would mark nothing
    assert len(NOT_RUN.findall(README.read_text())) == len(BLOCKS) - len(RUN)


def test_the_block_finder_sees_a_marker() -> None:
    text = "x\n```python\nprint(1)\n```\n\n<!-- test_readme: not run (a NATS cluster) -->\n"
    text += "```python\nnats()\n```\n```sh\nls\n```\n"
    assert python_blocks(text) == [(2, "print(1)\n", None), (7, "nats()\n", "a NATS cluster")]


@pytest.mark.parametrize(("line", "code"), RUN, ids=[f"README.md:{line}" for line, _ in RUN])
def test_a_readme_example_runs_as_written(tmp_path: Path, line: int, code: str) -> None:
    # the purelink these tests import, wherever the empty directory is
    source = str(Path(purelink.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (source, os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"README.md:{line}\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr


def test_the_security_keys_file_example_does_not_load_as_it_stands() -> None:
    text = (ROOT / "docs" / "security.md").read_text()
    (example,) = [m.group("code") for m in FENCE.finditer(text) if "# ID" in m.group("code")]
    assert "<SECRET>" in example
    with pytest.raises(KeysFileError, match="not base64"):
        parse_keys(example)


def test_the_docs_serve_metrics_from_applications_on_loopback_only() -> None:
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for call in re.findall(r"start_http_server\([^)]*\)", page.read_text()):
            assert 'addr="127.0.0.1"' in call, (page.name, call)
