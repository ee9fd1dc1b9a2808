"""One transfer through the emulated path: a Linux TCP one, or a purelink one
into a `purelink serve` in side B whose store is then read back.

Why a module of its own: the benchmark's matrix and torture runs (run.py) and
the emulator's self-test (selftest.py) both run transfers; here they share
them without the self-test importing the benchmark's main program.
"""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .constants import CHECKOUT, PEERS_MODULE, PORTS, SERVE_READY
from .emu import Emulator, EmulatorError

__all__ = ["Serve", "json_line", "peer", "run_plain_tcp", "run_purelink"]


class Serve:
    """`purelink serve` in side B with a temporary store (udp:// and tcp://)."""

    def __init__(self, emu: Emulator, sync: str) -> None:
        self.emu = emu
        self.dir = Path(tempfile.mkdtemp(prefix="purelink-paths-"))
        host = emu.addresses[1]
        argv = [
            sys.executable,
            "-m",
            "purelink",
            "serve",
            "--data",
            str(self.dir / "data"),
            "--udp",
            f"{host}:{PORTS['udp']}",
            "--tcp",
            f"{host}:{PORTS['tcp']}",
            "--sync",
            sync,
            "--insecure",
        ]
        self.log = open(self.dir / "serve.log", "wb")  # noqa: SIM115 -- closed in stop()
        self.proc = subprocess.Popen(
            emu.command(1, argv),
            cwd=CHECKOUT,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            start_new_session=True,
        )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith(SERVE_READY):
            self.stop()
            raise EmulatorError(f"purelink serve did not start in side B: {line.strip()!r}")

    def url(self, transport: str) -> str:
        return f"{transport}://{self.emu.addresses[1]}:{PORTS[transport]}"

    def read(self, stream: str) -> list[bytes]:
        import purelink  # noqa: PLC0415

        return [payload for _, payload in purelink.Store(str(self.dir / "data")).read(stream)]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.log.close()
        import shutil  # noqa: PLC0415

        shutil.rmtree(self.dir, ignore_errors=True)


def peer(emu: Emulator, side: int, *argv: str) -> list[str]:
    """argv that runs one of peers.py's programs in side `side` (0: A, 1: B)."""
    return emu.command(side, [sys.executable, "-m", PEERS_MODULE, *argv])


def json_line(text: str) -> dict[str, Any]:
    """The last JSON line of a peer's output ({} if none)."""
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            result: dict[str, Any] = json.loads(line)
            return result
    return {}


def _run_sender(emu: Emulator, argv: list[str], limit: float) -> dict[str, Any]:
    """Run a sender in side A: it connects and says so; then the path's clock
    (blackouts, counters) restarts and it is told to go; its JSON line back.

    The handshake keeps interpreter start-up and connection set-up out of
    the measured time and puts the first blackout at the same point of every
    transfer (1 s after its first byte)."""
    proc = subprocess.Popen(
        argv,
        cwd=CHECKOUT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        line = proc.stdout.readline().strip() if ready else ""
        if line != "connected":
            proc.kill()
            _, err = proc.communicate(timeout=30)
            return json_line(line) or {"ok": False, "error": (err or line).strip()[-300:]}
        emu.reset()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=limit + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"ok": False, "error": "the sender hung", "elapsed": limit}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return json_line(out) or {"ok": False, "error": err.strip()[-300:]}


def run_plain_tcp(emu: Emulator, cc: str, total: int, record: int, limit: float) -> dict[str, Any]:
    """One Linux TCP transfer A -> B with congestion control `cc`."""
    to = f"{emu.addresses[1]}:{PORTS['plain']}"
    recv = subprocess.Popen(
        peer(emu, 1, "tcp-recv", "--bind", to, "--bytes", str(total), "--timeout", str(limit + 5)),
        cwd=CHECKOUT,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert recv.stdout is not None
    emu.forget()  # each transport learns the path (its MTU) for itself
    try:
        if recv.stdout.readline().strip() != "ready":
            return {"ok": False, "error": "the TCP receiver did not start"}
        argv = peer(
            emu,
            0,
            "tcp-send",
            "--to",
            to,
            "--bytes",
            str(total),
            "--record",
            str(record),
            "--cc",
            cc,
            "--timeout",
            str(limit),
        )
        result = _run_sender(emu, argv, limit)
        router = emu.stats()
        if recv.poll() is None:
            recv.send_signal(signal.SIGTERM)
        out, _ = recv.communicate(timeout=30)
        result.update(moved=json_line(out).get("received", 0), router=router)
        return result
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait()
        recv.stdout.close()


def run_purelink(
    emu: Emulator,
    serve: Serve,
    transport: str,
    stream: str,
    records: list[bytes],
    limit: float,
    sender_args: Sequence[str],
) -> dict[str, Any]:
    """One purelink transfer A -> B; then the stream is read back and compared."""
    argv = peer(
        emu,
        0,
        "purelink-send",
        "--url",
        serve.url(transport),
        "--stream",
        stream,
        "--records",
        str(len(records)),
        "--timeout",
        str(limit),
        *sender_args,
    )
    emu.forget()  # each transport learns the path (its MTU) for itself
    result = _run_sender(emu, argv, limit)
    result["router"] = emu.stats()
    stored = serve.read(stream)
    result["exactly_once"] = stored == records
    # what is there so far is the records' start, each once and byte-exact
    result["intact"] = stored == records[: len(stored)]
    result["in_store"] = len(stored)
    result["moved"] = sum(map(len, records[: int(result.get("stored") or 0)]))
    return result
