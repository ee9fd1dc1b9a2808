"""`purelink bench connections`: 10,000 short-lived tcp:// links, 200 at a time.

Workload (io_uring's multishot-accept test, made durable): a client process
(this one) runs `--concurrency` threads; each, `--links` times in all,
connects a tcp:// link, queues one 128 B record, waits until the listener
says it is stored (fdatasync'ed: `--sync batch`), and closes the link.  The
listener runs in its own process, `purelink serve --no-udp --tcp 127.0.0.1:0`.

Variants:

* `drained accept` (the product): after one readiness event of the listening
  socket the listener accepts until EAGAIN, at most 64 (mechanism 3);
* `wire client`: the same `purelink serve` under a client as light as the
  echo servers' clients: each connection is a plain socket that
  speaks purelink's TCP wire itself (HELLO of an anonymous producer, the
  ACCEPT, one DATA of the record, ACKs until it is stored, CLOSE, the
  listener's close), in the echo clients' few Python lines, not a `Link`
  with its own thread.  Against `drained accept` it says what the client's
  own CPU costs the listener on a machine they share: fewer connections a
  second, so fewer records to share each fdatasync and each wakeup of the
  loop.  The listener runs with `--handshake-rate 0`: its HELLO limit is per
  source address, and this client makes all its HELLOs from one at several
  thousand a second;
* `one accept per event` (the "before"): the same `purelink serve`, run with
  the TCP side's `ACCEPT_BUDGET` set to 1 before it starts, so every
  accept costs one epoll wakeup;
* `uvloop echo` (the yardstick, `pip install '.[bench]'`): an asyncio
  Protocol echo server on uvloop in its own process; the same client shape
  with plain sockets: connect, send 128 B, read the 128 B back, close.  It
  stores nothing.
* `asyncio echo` (what a hand-written Python server runs on): the same
  Protocol on the standard library's event loop;
* `epoll echo` (the floor for a server written in Python): the least a
  Python server can do per connection -- one epoll loop that accepts until
  EAGAIN, reads once, writes the bytes back and closes, with no protocol, no
  objects per connection and no store.  Whatever purelink costs above it is
  its protocol and its store; whatever it costs below uvloop is out of reach
  of any server whose per-connection work runs in Python.
* `durable echo` (the floor for a Python server that keeps what it gets):
  the epoll echo, but each poll round's requests are appended to one file
  with one write and one fdatasync before any of them is answered (group
  commit).
* `durable 3-round echo` (the floor for a Python server in purelink's
  message shape): the durable echo, but the client speaks in purelink's
  rounds on a plain socket -- a 37 B "HELLO" answered at once with 60 B,
  the 128 B record answered with 68 B once it is fdatasync'ed, then a 20 B
  "CLOSE" after which the server closes.  No protocol is parsed.  What
  purelink costs above it is its protocol and its objects.
* `uvloop 3-round echo`: the same rounds as an asyncio Protocol on uvloop,
  the yardstick's own loop, storing nothing (the record is answered at
  once): against `uvloop echo` it isolates the cost of the message shape on
  a C event loop;
* `uvloop durable 3-round echo`: the same, with each loop iteration's
  records written and fdatasync'ed together before they are answered:
  against `uvloop 3-round echo` it isolates the cost of durability (its
  fdatasyncs) on a C event loop.

What is reported, per variant, the median (min-max) of `--repeat` runs of
`--links` connections (after a warm-up of `--concurrency` connections that is
not counted):

* server CPU us per connection: the server process's CPU time (every thread:
  for purelink the loop and the sync thread, user + system, from
  /proc/PID/task/*/schedstat) over the run, divided by the connections;
* busiest thread us per connection: the same for the one thread of the
  server that took the most (for purelink its loop; the rest is the sync
  thread's, mostly the kernel's work in its fdatasyncs; the echo servers
  have one thread), and the share of it spent in the kernel (system time,
  from /proc/PID/task/TID/stat in clock ticks: coarse for short runs);
* connections/s: connections / wall time of the run;
* client CPU us per connection: this process's CPU time (every thread, user
  + system, `getrusage`) over the run, divided by the connections: what the
  client spends on one (on 2 cores, CPU the server then cannot have);
* accepts per event: accepts / readiness events of the listening socket
  (purelink only; from the counters `purelink serve` prints when it stops,
  over all runs), and the pool's hits and misses;
* per connection (purelink only, same counters, warm-up included): readiness
  events drained (of the listening socket and of connections), ACKs sent
  (ACCEPTs not counted) and syncs.  These move with what the listener
  does per connection, not with the machine's load, so they compare two
  versions of the listener better than the CPU time does on a noisy machine;
* fdatasyncs per connection (warm-up included) of every server that stores:
  purelink's are two a sync (the segment's and its times file's); the echo
  servers count theirs and say so when they stop.  An fdatasync costs the
  kernel more CPU than a whole uvloop echo connection on some machines, and
  how many connections share one depends on the load (group commit), so
  this column explains much of the spread of the CPU figures.

Target (issue 27): purelink's CPU per connection <= 3x the uvloop echo
server's, while purelink also stores every record durably (the uvloop durable
3-round echo says what that shape and durability cost a C event loop).  It
is printed for both clients: purelink's own `Link`, and the wire client,
whose CPU per connection is the echo clients' (the client CPU column).  The
client is the same Python process for all variants and is usually the
bottleneck on 2 cores: connections/s says more about the client than about
the servers, and so does a server's CPU per connection wherever it shares
syncs and wakeups among the connections that arrive meanwhile (compare
`drained accept` with `wire client`).

Run from the checkout root: `python -m bench.connections [--links N]
[--concurrency C] [--json]`, or `purelink bench connections`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import os
import random
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import purelink
from purelink.protocol import wire
from purelink.protocol.framing import FrameDecoder, encode_frame
from purelink.protocol.messages import Accept, Ack, Hello

from ._common import (
    TCP_READY,
    Report,
    Summary,
    base_parser,
    process_cpu_ns,
    serve_stats,
    summarize,
    task_cpu_ns,
)
from ._impl import add_impl_argument, run_elsewhere

__all__ = ["VARIANTS", "main"]

VARIANTS = (
    "drained accept",
    "wire client",
    "one accept per event",
    "uvloop echo",
    "asyncio echo",
    "epoll echo",
    "durable echo",
    "durable 3-round echo",
    "uvloop 3-round echo",
    "uvloop durable 3-round echo",
)
ECHOES = (
    "uvloop echo",
    "asyncio echo",
    "epoll echo",
    "durable echo",
    "durable 3-round echo",
    "uvloop 3-round echo",
    "uvloop durable 3-round echo",
)
THREE_ROUNDS = ("durable 3-round echo", "uvloop 3-round echo", "uvloop durable 3-round echo")
# the 3-round echo's messages: sizes of a HELLO, an ACCEPT, an ACK and a CLOSE
HELLO, ACCEPT, ACK, CLOSE = b"h" * 37, b"a" * 60, b"k" * 68, b"c" * 20
RECORD = b"r" * 128
TIMEOUT = 60.0
WIRE_DATAGRAM = 1_400  # the wire client's HELLO: the largest datagram it sends

# `purelink serve` with the naive accept, one per readiness event (the "before",
# which the product does not carry): the TCP side's bound on accepts per event is
# set to 1 before the listener is made, then the real command line runs.
_NAIVE_SERVE = (
    "import sys, purelink.listener.tcp as t; t.ACCEPT_BUDGET = 1; "
    "from purelink.cli.command import main; sys.exit(main(sys.argv[1:]))"
)

_ECHO_SERVER = """
import asyncio, sys

class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
    def data_received(self, data):
        self.transport.write(data)

async def serve():
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Echo, "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    print(f"echo listening tcp=127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()

if sys.argv[1:] == ["uvloop"]:
    import uvloop
    uvloop.run(serve())
else:
    asyncio.run(serve())
"""

# The durable 3-round echo (below) as an asyncio Protocol on uvloop, the loop
# of the yardstick: the same rounds, on the same event loop as the uvloop echo,
# so the two differ only by the shape.  With a file (argv[1]) each loop
# iteration's records are appended with one write and one fdatasync, then
# answered (group commit); without one ("-") the record is answered at once.
# At SIGTERM it says on stderr how many fdatasyncs and connections it made.
_UVLOOP_3_ROUND_ECHO = """
import asyncio, os, signal, sys, uvloop

ACCEPT, ACK = b"a" * 60, b"k" * 68
log = None
if sys.argv[1] != "-":
    log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
pending = []
counts = [0, 0]  # fdatasyncs, connections

def flush():
    os.write(log, b"".join(data for _, data in pending))
    os.fdatasync(log)
    counts[0] += 1
    for transport, _ in pending:
        transport.write(ACK)
    pending.clear()

class ThreeRounds(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
        self.read = 0
        counts[1] += 1
    def data_received(self, data):
        self.read += 1
        if self.read == 1:  # the HELLO
            self.transport.write(ACCEPT)
        elif self.read == 2 and log is None:  # the record, stored nowhere
            self.transport.write(ACK)
        elif self.read == 2:  # the record
            if not pending:
                asyncio.get_running_loop().call_soon(flush)
            pending.append((self.transport, data))
        else:  # the CLOSE
            self.transport.close()

def stop():
    sys.stderr.write("fdatasyncs=%d connections=%d\\n" % tuple(counts))
    sys.stderr.flush()
    os._exit(0)

async def serve():
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop)
    server = await loop.create_server(ThreeRounds, "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    print(f"echo listening tcp=127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()

uvloop.run(serve())
"""

# The pure-Python servers share this: a listening socket, one epoll loop's state,
# accept until EAGAIN, the end of a connection, and its counts (what a durable
# one says at SIGTERM, as the uvloop one does).  Each server script is this and
# its own loop, run with `python -c`.
_EPOLL_PRELUDE = """
import os, select, signal, socket, sys
counts = [0, 0]  # fdatasyncs, connections

def stop(signum, frame):
    sys.stderr.write("fdatasyncs=%d connections=%d\\n" % tuple(counts))
    sys.stderr.flush()
    os._exit(0)

signal.signal(signal.SIGTERM, stop)
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(4096)
srv.setblocking(False)
print(f"echo listening tcp=127.0.0.1:{srv.getsockname()[1]}", flush=True)
ep = select.epoll()
ep.register(srv.fileno(), select.EPOLLIN)
lfd = srv.fileno()
conns = {}  # fd -> [socket, messages read]

def accept_all():
    while True:
        try:
            c, _ = srv.accept()
        except BlockingIOError:
            return
        c.setblocking(False)
        counts[1] += 1
        conns[c.fileno()] = [c, 0]
        ep.register(c.fileno(), select.EPOLLIN)

def gone(fd, c):
    ep.unregister(fd)
    del conns[fd]
    c.close()
"""

_EPOLL_ECHO = (
    _EPOLL_PRELUDE
    + """
while True:
    for fd, _ in ep.poll():
        if fd == lfd:
            accept_all()
            continue
        c = conns[fd][0]
        try:
            data = c.recv(4096)
        except BlockingIOError:
            continue
        if data:
            c.send(data)
        else:
            gone(fd, c)
"""
)

# The epoll echo that also stores: each round's requests are appended to one
# file with one write and made durable with one fdatasync before any of them is
# answered (group commit: what arrives during a sync is the next round's group).
# The least a Python server can do per connection and still keep what it got.
_DURABLE_ECHO = (
    _EPOLL_PRELUDE
    + """
log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
while True:
    got = []
    for fd, _ in ep.poll():
        if fd == lfd:
            accept_all()
            continue
        c = conns[fd][0]
        try:
            data = c.recv(4096)
        except BlockingIOError:
            continue
        if data:
            got.append((c, data))
        else:
            gone(fd, c)
    if got:
        os.write(log, b"".join(data for _, data in got))
        os.fdatasync(log)
        counts[0] += 1
        for c, data in got:
            c.send(data)
"""
)

# The durable echo in purelink's message shape: a HELLO is answered at once;
# the record is stored (group commit, as above) and then answered; a CLOSE
# ends the connection, which the server closes.  Three client messages at
# three times, two answers, one fdatasync share: the least a Python server
# speaking a protocol of purelink's shape can do, with no protocol in it.
# It counts reads, not messages: it relies on its client sending each
# message only after the previous answer, and on loopback delivering 128 B
# in one piece (a split record or a HELLO and record in one read would be
# mistaken); for a floor, parsing nothing is the point.
_DURABLE_3_ROUND_ECHO = (
    _EPOLL_PRELUDE
    + """
log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
ACCEPT, ACK = b"a" * 60, b"k" * 68
while True:
    got = []
    for fd, _ in ep.poll():
        if fd == lfd:
            accept_all()
            continue
        entry = conns[fd]
        c = entry[0]
        try:
            data = c.recv(4096)
        except BlockingIOError:
            continue
        if data and entry[1] == 0:  # the HELLO
            entry[1] = 1
            c.send(ACCEPT)
        elif data and entry[1] == 1:  # the record
            entry[1] = 2
            got.append((c, data))
        else:  # the CLOSE, or the peer went away
            gone(fd, c)
    if got:
        os.write(log, b"".join(data for _, data in got))
        os.fdatasync(log)
        counts[0] += 1
        for c, _ in got:
            c.send(ACK)
"""
)


class Child:
    """A server process that prints `... tcp=HOST:PORT ...` when ready."""

    def __init__(self, command: list[str]) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="purelink-bench-conn-"))
        self.log_path = self.workdir / "stderr.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 -- closed in close()
        self.proc = subprocess.Popen(
            [c.replace("{DATA}", str(self.workdir / "data")) for c in command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
            start_new_session=True,
        )
        self.address = self._ready()

    def _ready(self) -> tuple[str, int]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + TIMEOUT
        buf = b""
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            readable, _, _ = select.select([fd], [], [], max(left, 0))
            chunk = os.read(fd, 4096) if readable else b""
            if not chunk:
                self.close()
                raise RuntimeError(f"server not ready: {self.log_path.read_text()[-500:]}")
            buf += chunk
        line = buf.split(b"\n", 1)[0].decode()
        found = TCP_READY.search(line)
        if found is None:
            self.close()
            raise RuntimeError(f"no tcp=HOST:PORT in the server's ready line: {line!r}")
        return found.group(1).strip("[]"), int(found.group(2))

    def cpu_ns(self) -> int:
        return process_cpu_ns(self.proc.pid)

    def stop(self) -> dict[str, Any]:
        """SIGTERM; the counters of `purelink serve`'s stop record, or the echo
        server's `fdatasyncs=N connections=M` line (if any)."""
        self.proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=TIMEOUT)
        self._log.close()
        text = self.log_path.read_text(errors="replace")
        return serve_stats(text) or _echo_counts(text)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        if not self._log.closed:
            self._log.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _echo_counts(text: str) -> dict[str, Any]:
    """{"fdatasyncs": N, "connections": M} from an echo server's stop line, or {}."""
    for line in reversed(text.splitlines()):
        if line.startswith("fdatasyncs="):
            return {k: int(v) for k, v in (part.split("=") for part in line.split())}
    return {}


def _short_link(url: str) -> None:
    link = purelink.connect(url, stream="bench", capacity=16, timeout=TIMEOUT)
    link.queue(RECORD)
    if not link.wait_stored(timeout=TIMEOUT):
        raise RuntimeError("a record was not stored in time")
    link.close(timeout=TIMEOUT)


def _echo_once(address: tuple[str, int]) -> None:
    with socket.create_connection(address, timeout=TIMEOUT) as sock:
        sock.sendall(RECORD)
        got = 0
        while got < len(RECORD):
            data = sock.recv(4096)
            if not data:
                raise RuntimeError("the echo server closed early")
            got += len(data)


def _three_rounds_once(address: tuple[str, int]) -> None:
    """The durable 3-round echo's client: purelink's message shape on a plain socket."""
    with socket.create_connection(address, timeout=TIMEOUT) as sock:
        for message, answer in ((HELLO, len(ACCEPT)), (RECORD, len(ACK)), (CLOSE, 0)):
            sock.sendall(message)
            got = 0
            while True:
                data = sock.recv(4096)
                got += len(data)
                if not data or (answer and got >= answer):
                    break
            if got < answer:
                raise RuntimeError("the 3-round echo server closed early")


def _wire_once(address: tuple[str, int]) -> None:
    """The wire client: one short link of an anonymous producer, spoken on a
    plain socket (docs/wire.md sections 3 and 5), its record stored before it
    closes.  Anything but the expected answers is an error."""
    with socket.create_connection(address, timeout=TIMEOUT) as sock:
        hello = Hello(random.getrandbits(64), "bench", "", random.getrandbits(63) | 1 << 63,
                      WIRE_DATAGRAM, b"")  # fmt: skip
        sock.sendall(encode_frame(wire.encode_hello(hello)))
        frames = _frames(sock)
        accept = wire.decode_datagram(_next(frames))
        if not isinstance(accept, Accept):
            raise RuntimeError(f"the listener answered a HELLO with {accept!r}")
        seq = accept.stored + 1
        batch = wire.encode_batch(accept.producer, accept.epoch, seq, [RECORD])
        sock.sendall(encode_frame(wire.encode_data(accept.conn_id, 1, batch)))
        while True:
            ack = wire.decode_datagram(_next(frames))
            if not isinstance(ack, Ack):
                raise RuntimeError(f"the listener answered a DATA with {ack!r}")
            if ack.stored >= seq:
                break
        sock.sendall(encode_frame(wire.encode_close(accept.conn_id, accept.epoch)))
        if next(frames, None) is not None:
            raise RuntimeError("the listener answered a CLOSE")


def _next(frames: Iterator[bytes]) -> bytes:
    frame = next(frames, None)
    if frame is None:
        raise RuntimeError("the listener closed the connection early")
    return frame


def _frames(sock: socket.socket) -> Iterator[bytes]:
    """The datagrams of a TCP connection's frames, in order, until its end."""
    decoder = FrameDecoder()
    while data := sock.recv(4096):
        yield from decoder.feed(data)


def _busiest(
    before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]
) -> tuple[int, float]:
    """The thread that took the most CPU between two `task_cpu_ns`: its ns, and
    the share of them in the kernel (system time / all of its time)."""
    most, ticks = 0, 0
    for tid, (ns, stime) in after.items():
        was_ns, was_stime = before.get(tid, (0, 0))
        if ns - was_ns > most:
            most, ticks = ns - was_ns, stime - was_stime
    tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    return most, min(ticks * tick_ns / most, 1.0) if most else 0.0


def _own_cpu() -> float:
    """CPU seconds of this process, the client (user + system, every thread)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _run(task: Callable[[], None], count: int, concurrency: int) -> float:
    """Run `task` `count` times, `concurrency` at a time; wall seconds."""
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        futures = [pool.submit(task) for _ in range(count)]
        for future in futures:
            future.result(timeout=TIMEOUT * 4)
    return time.perf_counter() - start


def _command(name: str, sync: str) -> list[str]:
    """The server process of variant `name` ("{DATA}": its working directory's data)."""
    scripts = {
        "uvloop echo": [_ECHO_SERVER, "uvloop"],
        "asyncio echo": [_ECHO_SERVER, "asyncio"],
        "epoll echo": [_EPOLL_ECHO],
        "durable echo": [_DURABLE_ECHO, "{DATA}"],
        "durable 3-round echo": [_DURABLE_3_ROUND_ECHO, "{DATA}"],
        "uvloop 3-round echo": [_UVLOOP_3_ROUND_ECHO, "-"],
        "uvloop durable 3-round echo": [_UVLOOP_3_ROUND_ECHO, "{DATA}"],
    }
    if name in scripts:
        return [sys.executable, "-c", *scripts[name]]
    serve = ["serve", "--data", "{DATA}", "--no-udp", "--tcp", "127.0.0.1:0", "--sync", sync,
             "--log-format", "json"]  # fmt: skip
    if name == "drained accept":
        return [sys.executable, "-m", "purelink", *serve]
    if name == "wire client":
        return [sys.executable, "-m", "purelink", *serve, "--handshake-rate", "0"]
    return [sys.executable, "-c", _NAIVE_SERVE, *serve]


def _task(name: str, address: tuple[str, int]) -> Callable[[], None]:
    """One connection's work against variant `name`'s server at `address`."""
    if name in THREE_ROUNDS:
        return lambda: _three_rounds_once(address)
    if name in ECHOES:
        return lambda: _echo_once(address)
    if name == "wire client":
        return lambda: _wire_once(address)
    url = "tcp://%s:%d" % address
    return lambda: _short_link(url)


def _variant(
    name: str, links: int, concurrency: int, repeat: int, sync: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    child = Child(_command(name, sync))
    try:
        task = _task(name, child.address)
        _run(task, concurrency, concurrency)  # warm-up, not counted
        cpu: list[float] = []
        busiest: list[float] = []
        in_kernel: list[float] = []
        rate: list[float] = []
        client: list[float] = []
        for _ in range(repeat):
            before, threads = child.cpu_ns(), task_cpu_ns(child.proc.pid)
            mine = _own_cpu()
            wall = _run(task, links, concurrency)
            client.append((_own_cpu() - mine) / links * 1e6)
            cpu.append((child.cpu_ns() - before) / links / 1000)
            ns, kernel = _busiest(threads, task_cpu_ns(child.proc.pid))
            busiest.append(ns / links / 1000)
            in_kernel.append(kernel)
            rate.append(links / wall)
        stats = child.stop()
        if name not in ECHOES:
            stored = sum(1 for _ in purelink.Store(child.workdir / "data").read("bench"))
            expected = links * repeat + concurrency
            if stored != expected:
                raise RuntimeError(f"{name}: {stored} records stored, {expected} expected")
    finally:
        child.close()
    row: dict[str, Any] = {
        "variant": name,
        "server CPU us/conn": summarize(cpu, "us"),
        "busiest thread us/conn": summarize(busiest, "us"),
        "busiest in kernel": summarize(in_kernel, "share"),
        "conns/s": summarize(rate, "connections/s"),
        "client CPU us/conn": summarize(client, "us"),
    }
    if "accepts" in stats:  # purelink's counters
        row["accepts/event"] = stats["accepts"] / max(stats["accept_drains"], 1)
        conns = max(stats["accepts"], 1)
        row["events/conn"] = stats["drains"] / conns
        row["ACKs/conn"] = stats["acks"] / conns
        row["syncs/conn"] = stats["syncs"] / conns
        if sync != "none":  # two a sync: the segment's and its times file's
            row["fdatasyncs/conn"] = 2 * stats["syncs"] / conns
        row["pool hits"] = stats["pool_hits"]
        row["pool misses"] = stats["pool_misses"]
    elif stats.get("fdatasyncs"):  # an echo server that stores
        row["fdatasyncs/conn"] = stats["fdatasyncs"] / max(stats["connections"], 1)
    return row, stats


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = base_parser("connections", "short-lived tcp:// links, listener CPU per connection")
    parser.add_argument("--links", type=int, default=10_000, help="connections per run")
    parser.add_argument("--concurrency", type=int, default=200, help="connections at a time")
    parser.add_argument("--sync", choices=("batch", "always", "none"), default="batch")
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"comma-separated, of: {', '.join(VARIANTS)}"
    )
    add_impl_argument(parser)
    args = parser.parse_args(argv)
    args.variant_list = [v.strip() for v in args.variants.split(",") if v.strip()]
    if (
        args.links < 1
        or args.concurrency < 1
        or args.repeat < 1
        or set(args.variant_list) - set(VARIANTS)
    ):
        parser.error("--links, --concurrency and --repeat must be positive; variants as listed")
    return args


def _report(args: argparse.Namespace) -> Report:
    return Report(
        "connections",
        f"{args.links:,} short tcp:// links (connect, queue 128 B, stored, close), "
        f"{args.concurrency} at a time",
        parameters={
            "links": args.links,
            "concurrency": args.concurrency,
            "repeat": args.repeat,
            "sync": args.sync,
        },
        columns=[
            "variant",
            "server CPU us/conn",
            "busiest thread us/conn",
            "busiest in kernel",
            "conns/s",
            "client CPU us/conn",
            "accepts/event",
            "events/conn",
            "ACKs/conn",
            "syncs/conn",
            "fdatasyncs/conn",
            "pool hits",
            "pool misses",
        ],
    )


def _compare(report: Report, cpu: dict[str, Summary]) -> None:
    """The ratios of CPU per connection: purelink against the "before" and the yardsticks."""
    after, light, before, echo, aio, floor, durable, shaped, uv_rounds, uv_shaped = (
        cpu.get(v) for v in VARIANTS
    )
    if after is not None and before is not None:
        report.notes.append(
            f"drained accept / one accept per event: {after.median / before.median:.2f} "
            "x the CPU per connection"
        )
    if after is not None and echo is not None:
        met = "met" if after.median <= 3 * echo.median else "NOT met"
        report.notes.append(
            f"purelink (stores, fdatasync) / uvloop echo (stores nothing): "
            f"{after.median / echo.median:.2f} x the CPU per connection (target <= 3: {met})"
        )
    if light is not None and echo is not None:
        met = "met" if light.median <= 3 * echo.median else "NOT met"
        report.notes.append(
            f"purelink under the wire client (as light as the echo clients) / uvloop echo: "
            f"{light.median / echo.median:.2f} x the CPU per connection (target <= 3: {met})"
        )
    if after is not None and light is not None:
        report.notes.append(
            f"purelink under its Link client / under the wire client: "
            f"{after.median / light.median:.2f} x the CPU per connection"
        )
    for label, ref in (
        ("asyncio echo", aio),
        ("epoll echo (pure Python floor)", floor),
        ("durable echo (pure Python floor that stores)", durable),
        ("durable 3-round echo (the same in purelink's message shape)", shaped),
        ("uvloop 3-round echo (that shape on uvloop, storing nothing)", uv_rounds),
        ("uvloop durable 3-round echo (that shape on uvloop, durable)", uv_shaped),
    ):
        if after is not None and ref is not None:
            report.notes.append(
                f"purelink / {label}: {after.median / ref.median:.2f} x the CPU per connection"
            )
    for label, ref in (
        ("epoll echo", floor),
        ("durable echo", durable),
        ("durable 3-round echo", shaped),
        ("uvloop 3-round echo", uv_rounds),
        ("uvloop durable 3-round echo", uv_shaped),
    ):
        if ref is not None and echo is not None:
            report.notes.append(f"{label} / uvloop echo: {ref.median / echo.median:.2f} x")


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parse(argv)
    if (code := run_elsewhere("connections", argv, args)) is not None:
        return code
    with contextlib.suppress(ValueError, OSError):  # 200 links take ~1,000 descriptors
        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    report = _report(args)
    cpu: dict[str, Summary] = {}
    for name in args.variant_list:
        if name.startswith("uvloop"):
            try:
                import uvloop  # noqa: F401, PLC0415 -- only to see that it is there
            except ImportError:
                report.notes.append(f"{name}: skipped (pip install '.[bench]')")
                continue
        row, stats = _variant(name, args.links, args.concurrency, args.repeat, args.sync)
        report.add(**row)
        cpu[name] = row["server CPU us/conn"]
        if stats:
            report.extra[name] = stats
    _compare(report, cpu)
    report.emit(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
