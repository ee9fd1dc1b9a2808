"""The configuration file and the systemd unit the docs show are ones that work.

Why it exists: docs/deploy.md and the README's *Configuration* are copied into
/etc by people setting up a service; an example with a key `serve` does not
know, or a unit systemd refuses, would fail them at the worst moment.  The
TOML examples are read by serve's own parser (cli/config.py), and the unit is
checked by `systemd-analyze verify` where this machine has it.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from purelink.cli.config import with_config
from purelink.cli.serve import add_serve_arguments

ROOT = Path(__file__).resolve().parents[2]


def _blocks(doc: str, language: str) -> list[str]:
    text = (ROOT / doc).read_text()
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


@pytest.mark.parametrize("doc", ["docs/deploy.md", "README.md"])
def test_the_documented_config_file_is_one_serve_reads(tmp_path: Path, doc: str) -> None:
    blocks = [b for b in _blocks(doc, "toml") if "serve.toml" in b]
    assert blocks, f"no serve.toml example in {doc}"
    config = tmp_path / "serve.toml"
    config.write_text(blocks[0])
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    args = parser.parse_args(with_config(parser._actions, ["--config", str(config)], {}))
    assert args.data == "/var/lib/purelink"
    assert args.retain_bytes == 50 << 30
    assert args.retain_age == 30 * 86400.0
    assert args.metrics.startswith("127.0.0.1:")  # loopback, as the page says


def test_the_documented_unit_is_valid(tmp_path: Path) -> None:
    (unit,) = _blocks("docs/deploy.md", "ini")
    assert "ExecStart=/opt/purelink/bin/purelink serve\n" in unit
    assert "User=purelink\n" in unit and "StateDirectory=purelink\n" in unit
    assert "ProtectSystem=strict\n" in unit
    assert "Environment=PURELINK_CONFIG=/etc/purelink/serve.toml\n" in unit
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("no systemd-analyze here")
    # the binary must exist for verify: this checkout's interpreter stands in for it
    path = tmp_path / "purelink.service"
    path.write_text(unit.replace("/opt/purelink/bin/purelink", f"{sys.executable} -m purelink"))
    result = subprocess.run(
        [analyze, "verify", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    own = [line for line in result.stderr.splitlines() if path.name in line]
    assert result.returncode == 0 and not own, result.stderr
