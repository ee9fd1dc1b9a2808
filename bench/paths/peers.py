"""The programs that run inside the emulator's namespaces (emu.py).

Why it exists: a sender and a receiver on either side of the emulated path
must be separate processes, each in its own network namespace (`ip netns
exec`), so each is a small verb of this module that prints one JSON line
(or "ready") on stdout and is bounded by its own `--timeout`:

* `guard -- ARGV...`: exec ARGV with PR_SET_PDEATHSIG, so it dies with the
  process that started it (what emu.py wraps every command in);
* `tcp-recv --bind H:P --bytes N`: accept one connection, read N bytes, send
  one byte back (the "all stored" of plain TCP: the bytes reached the
  receiving application; nothing is written to disk);
* `tcp-send --to H:P --bytes N --cc bbr|cubic`: connect with that congestion
  control (TCP_CONGESTION), write N bytes of 1,000-byte records, time from
  the first write to the receiver's one-byte reply;
  (both senders print "connected" once connected and start on a line
  on stdin, so the starter can restart the path's clock right then);
* `purelink-send --url URL --records N --size B | --mixed SEED`: connect,
  queue every record, wait until all are stored; time from the first queue
  to the last told stored, with the link's counters;
* `tcp-flow --to H:P --cc C --seconds S` / `purelink-flow --url URL --seconds S`:
  a bulk flow for a fixed time instead of a fixed size (`--shared`, shared.py):
  send as fast as the path takes it from "go" for S seconds, then stop;
  `tcp-sink --bind H:P` reads one such TCP flow and time-stamps what
  arrived ([time, bytes so far] every `--every` seconds, on the monotonic
  clock, which all namespaces share);
* `echo --bind H:P` / `ping --to H:P --count N`: a UDP echo and a pinger
  that measures round trips (the emulator's self-test);
* `pmtu --to H:P --size B`: DF datagrams until the kernel learns a smaller
  path MTU from an ICMP error; prints what it learned.

Records are made before any timing starts; `mixed_records` (0 B to 20 KiB,
log-uniform, seeded) is shared with the checker in run.py.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import itertools
import json
import math
import os
import random
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["fixed_records", "main", "mixed_records", "purelink_origin"]

TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", 13)
IP_MTU_DISCOVER = getattr(socket, "IP_MTU_DISCOVER", 10)
IP_PMTUDISC_DO = getattr(socket, "IP_PMTUDISC_DO", 2)
IP_MTU = getattr(socket, "IP_MTU", 14)
PR_SET_PDEATHSIG = 1
SO_LINGER_NOW = struct.pack("ii", 1, 0)
"""SO_LINGER on, 0 s: close() resets the connection and drops what is unsent."""
STATE_EVERY = 0.1
"""Seconds between the samples of a purelink flow's controller state (`states`)."""


def fixed_records(count: int, size: int) -> list[bytes]:
    """`count` distinct records of `size` bytes (the index first)."""
    tail = (b"purelink paths record " * (size // 22 + 1))[: max(0, size - 8)]
    return [i.to_bytes(8, "big")[-size:] + tail if size >= 8 else b"x" * size
            for i in range(1, count + 1)]  # fmt: skip


def mixed_records(count: int, seed: int, largest: int = 20 * 1024) -> list[bytes]:
    """`count` records of 0 B to `largest` bytes, sizes log-uniform, content seeded."""
    rng = random.Random(seed)
    filler = bytes(rng.getrandbits(8) for _ in range(256)) * (largest // 256 + 1)
    out = []
    for i in range(1, count + 1):
        size = min(largest, int(math.exp(rng.random() * math.log(largest + 1))) - 1)
        head = i.to_bytes(8, "big")
        out.append((head + filler[i % 256 : i % 256 + max(0, size - 8)])[:size])
    return out


def _hostport(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def _say(obj: dict[str, Any]) -> None:
    print(json.dumps(obj), flush=True)


def _connected_then_wait() -> None:
    """Tell the starter the connection is up; start when it says "go" (or at EOF)."""
    print("connected", flush=True)
    sys.stdin.readline()


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send `sig` to this process when its parent exits."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def _guard(argv: Sequence[str]) -> int:
    args = list(argv[1:] if argv[:1] == ["--"] else argv)
    set_parent_death_signal()
    os.execvp(args[0], args)
    return 127  # pragma: no cover - execvp does not return


def _tcp_recv(args: argparse.Namespace) -> int:
    got = 0
    stopped = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stopped
        stopped = True
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    server = socket.create_server(_hostport(args.bind))
    print("ready", flush=True)
    server.settimeout(args.timeout)
    try:
        conn, _ = server.accept()
        conn.settimeout(args.timeout)
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        deadline = time.monotonic() + args.timeout
        while got < args.bytes and time.monotonic() < deadline:
            n = conn.recv_into(view)
            if not n:
                break
            got += n
        if got >= args.bytes:
            conn.sendall(b"k")
        conn.close()
    except (OSError, SystemExit):
        pass
    _say({"received": got, "complete": got >= args.bytes, "stopped": stopped})
    return 0


def _tcp_socket(args: argparse.Namespace) -> tuple[socket.socket, str] | None:
    """A TCP socket with congestion control `--cc`, connected to `--to`, and the
    name of the control the kernel gave it; None (the error said) if it failed."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, args.cc.encode())
    except OSError as exc:
        sock.close()
        _say({"ok": False, "error": f"TCP_CONGESTION {args.cc}: {exc.strerror}"})
        return None
    cc = sock.getsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, 16).rstrip(b"\0").decode()
    sock.settimeout(args.timeout)
    try:
        sock.connect(_hostport(args.to))
    except OSError as exc:
        sock.close()
        _say({"ok": False, "error": f"connect: {exc}"})
        return None
    return sock, cc


def _tcp_send(args: argparse.Namespace) -> int:
    opened = _tcp_socket(args)
    if opened is None:
        return 1
    sock, cc = opened
    chunk = b"".join(fixed_records(64, args.record))
    _connected_then_wait()
    deadline = time.monotonic() + args.timeout
    start = time.perf_counter()
    sent, reply = 0, b""
    try:
        view = memoryview(chunk)
        while sent < args.bytes:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
            sent += sock.send(view[: min(len(chunk), args.bytes - sent)])
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        reply = sock.recv(1)
    except (TimeoutError, OSError):
        pass
    elapsed = time.perf_counter() - start
    sock.close()
    _say({"ok": reply == b"k", "elapsed": elapsed, "sent": sent, "cc": cc})
    return 0


def _purelink_send(args: argparse.Namespace) -> int:
    import purelink  # noqa: PLC0415 -- the version under test (PYTHONPATH may point elsewhere)

    if args.mixed is not None:
        records = mixed_records(args.records, args.mixed)
    else:
        records = fixed_records(args.records, args.size)
    extra: dict[str, Any] = {}
    if args.congestion:
        extra["congestion"] = args.congestion
    try:
        link = purelink.connect(args.url, stream=args.stream, timeout=args.timeout, **extra)
    except (purelink.Error, TypeError) as exc:
        _say({"ok": False, "error": f"connect: {type(exc).__name__}: {exc}"})
        return 1
    queue = link.queue
    _connected_then_wait()
    start = time.perf_counter()
    for record in records:
        queue(record)
    ok = link.wait_stored(timeout=args.timeout)
    elapsed = time.perf_counter() - start
    stats = dataclasses.asdict(link.stats())
    with contextlib.suppress(purelink.Error):
        link.close(timeout=1.0)
    _say({"ok": ok, "elapsed": elapsed, "stored": link.stored, "queued": len(records),
          "bytes": sum(map(len, records)), "stats": stats})  # fmt: skip
    return 0


def purelink_origin() -> str:
    """The directory `import purelink` loads here (which checkout is under test)."""
    import purelink  # noqa: PLC0415 -- the version under test (PYTHONPATH may point elsewhere)

    return os.path.dirname(os.path.abspath(purelink.__file__))


def _tcp_sink(args: argparse.Namespace) -> int:
    """Read one TCP flow to its end; [monotonic time, bytes so far] every `--every` s.

    The time stamps are taken here, on the receiving side, as the bytes come
    out of the socket: what the flow delivered, not what its sender wrote."""

    def on_term(signum: int, frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    server = socket.create_server(_hostport(args.bind))
    print("ready", flush=True)
    server.settimeout(args.timeout)
    clock = time.monotonic
    got, samples = 0, []
    try:
        conn, _ = server.accept()
        conn.settimeout(args.timeout)
        view = memoryview(bytearray(1 << 20))
        last = clock()
        samples.append((last, 0))
        while True:
            n = conn.recv_into(view)
            if not n:
                break
            got += n
            now = clock()
            if now - last >= args.every:
                samples.append((now, got))
                last = now
    except (OSError, SystemExit):  # a reset ends a flow too (SO_LINGER 0 at its end)
        pass
    samples.append((clock(), got))
    _say({"received": got, "samples": samples})
    return 0


def _tcp_flow(args: argparse.Namespace) -> int:
    """Write 1,000-B records as fast as TCP takes them for `--seconds` after "go"."""
    opened = _tcp_socket(args)
    if opened is None:
        return 1
    sock, cc = opened
    view = memoryview(b"".join(fixed_records(64, args.record)))
    _connected_then_wait()
    cpu0, start = time.process_time(), time.monotonic()
    end = start + args.seconds
    sent, error = 0, ""
    try:
        while (left := end - time.monotonic()) > 0:
            sock.settimeout(left)
            sent += sock.send(view)
    except TimeoutError:
        pass
    except OSError as exc:
        error = str(exc)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, SO_LINGER_NOW)
    sock.close()
    _say({"ok": not error, "error": error, "cc": cc, "sent": sent, "start": start,
          "elapsed": time.monotonic() - start, "cpu_s": time.process_time() - cpu0})  # fmt: skip
    return 0


def _purelink_flow(args: argparse.Namespace) -> int:
    """Queue `--size`-B records for `--seconds` after "go", keeping `--backlog` unstored.

    The link is never starved (the backlog is far above any window the
    paths need) and never asked to hold more than the backlog."""
    import purelink  # noqa: PLC0415 -- the version under test (PYTHONPATH may point elsewhere)

    records = fixed_records(64, args.size)
    extra: dict[str, Any] = {"congestion": args.congestion} if args.congestion else {}
    try:
        link = purelink.connect(args.url, stream=args.stream, timeout=args.timeout, **extra)
    except (purelink.Error, TypeError, ValueError) as exc:
        _say({"ok": False, "error": f"connect: {type(exc).__name__}: {exc}"})
        return 1
    queue, wait, half = link.queue, link.wait_stored, max(1, args.backlog // 2)
    _connected_then_wait()
    cpu0, start = time.process_time(), time.monotonic()
    end = start + args.seconds
    error = ""
    states: list[dict[str, Any]] = []
    due = start
    try:
        while (now := time.monotonic()) < end:
            if now >= due:
                states.append(_state(link, now - start))
                due = now + STATE_EVERY
            queued = link.queued
            if queued - link.stored < args.backlog:
                for record in itertools.islice(itertools.cycle(records), half):
                    queue(record)
            else:
                wait(queued - half, timeout=min(end - now, max(due - now, 0.0)))
    except purelink.Error as exc:
        error = f"{type(exc).__name__}: {exc}"
    stats = dataclasses.asdict(link.stats())
    with contextlib.suppress(purelink.Error):
        link.close(timeout=0.2)
    _say({"ok": not error, "error": error, "queued": link.queued, "stored": link.stored,
          "start": start, "elapsed": time.monotonic() - start,
          "cpu_s": time.process_time() - cpu0, "purelink": purelink_origin(),
          "stats": stats, "states": states})  # fmt: skip
    return 0


def _state(link: Any, at: float) -> dict[str, Any]:
    """What the link's congestion controller says at `at` s after "go": its
    verdict on what shares the path, its mode and its model (`states` of the
    flow's JSON: which verdict a run gave, and when)."""
    st = link.stats()
    return {
        "t": round(at, 3),
        "cross_traffic": st.cross_traffic,
        "state": st.congestion_state,
        "btl_bw": st.btl_bw,
        "min_rtt": st.min_rtt,
        "rtt": st.rtt,
        "cwnd": st.cwnd,
        "retransmits": st.retransmits,
    }


def _echo(args: argparse.Namespace) -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(_hostport(args.bind))
    print("ready", flush=True)
    sock.settimeout(args.timeout)
    with contextlib.suppress(OSError):
        while True:
            data, peer = sock.recvfrom(65535)
            sock.sendto(data, peer)
    return 0


def _ping(args: argparse.Namespace) -> int:
    """Send `count` probes of `size` bytes, `interval` apart; report every round trip.

    Each probe carries its index and send time, so loss, duplicates and
    reordering are seen as well as delay.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect(_hostport(args.to))
    sock.setblocking(False)
    pad = b"\0" * max(0, args.size - 12)
    rtts: list[float] = []
    seen: dict[int, int] = {}
    order: list[int] = []
    start = time.perf_counter()
    end = start + args.count * args.interval + args.linger
    sent = 0
    while True:
        now = time.perf_counter()
        if sent < args.count and now >= start + sent * args.interval:
            with contextlib.suppress(BlockingIOError):
                sock.send(struct.pack("!Id", sent, now) + pad)
            sent += 1
            continue
        if now >= end:
            break
        nxt = start + sent * args.interval if sent < args.count else end
        ready, _, _ = select.select([sock], [], [], max(0.0, min(nxt, end) - now))
        if ready:
            with contextlib.suppress(BlockingIOError):
                while True:
                    data = sock.recv(65535)
                    index, sent_at = struct.unpack_from("!Id", data)
                    seen[index] = seen.get(index, 0) + 1
                    if seen[index] == 1:
                        rtts.append(time.perf_counter() - sent_at)
                        order.append(index)
    reordered = sum(1 for a, b in itertools.pairwise(order) if b < a)
    _say({"sent": sent, "received": len(rtts), "duplicates": sum(seen.values()) - len(seen),
          "reordered": reordered, "rtt": rtts, "order": order})  # fmt: skip
    return 0


def _pmtu(args: argparse.Namespace) -> int:
    """Send DF datagrams of `size` bytes until the kernel's path MTU drops below it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
    sock.connect(_hostport(args.to))
    first = sock.getsockopt(socket.IPPROTO_IP, IP_MTU)
    refused = 0
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        try:
            sock.send(b"m" * args.size)
        except OSError:  # EMSGSIZE: the kernel learned a smaller path MTU
            refused += 1
            break
        time.sleep(0.05)
    _say(
        {
            "mtu_before": first,
            "mtu_after": sock.getsockopt(socket.IPPROTO_IP, IP_MTU),
            "refused": refused,
        }
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["guard"]:
        return _guard(args_list[1:])
    parser = argparse.ArgumentParser(prog="python -m bench.paths.peers")
    sub = parser.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("tcp-recv")
    p.add_argument("--bind", required=True)
    p.add_argument("--bytes", type=int, required=True)
    p.add_argument("--timeout", type=float, default=120.0)
    p = sub.add_parser("tcp-send")
    p.add_argument("--to", required=True)
    p.add_argument("--bytes", type=int, required=True)
    p.add_argument("--record", type=int, default=1000)
    p.add_argument("--cc", default="bbr")
    p.add_argument("--timeout", type=float, default=120.0)
    p = sub.add_parser("purelink-send")
    p.add_argument("--url", required=True)
    p.add_argument("--stream", default="paths")
    p.add_argument("--records", type=int, required=True)
    p.add_argument("--size", type=int, default=1000)
    p.add_argument("--mixed", type=int, default=None, metavar="SEED")
    p.add_argument("--congestion", default=None)
    p.add_argument("--timeout", type=float, default=120.0)
    p = sub.add_parser("tcp-sink")
    p.add_argument("--bind", required=True)
    p.add_argument("--every", type=float, default=0.05)
    p.add_argument("--timeout", type=float, default=120.0)
    p = sub.add_parser("tcp-flow")
    p.add_argument("--to", required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--record", type=int, default=1000)
    p.add_argument("--cc", default="cubic")
    p.add_argument("--timeout", type=float, default=30.0)
    p = sub.add_parser("purelink-flow")
    p.add_argument("--url", required=True)
    p.add_argument("--stream", default="shared")
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--size", type=int, default=1000)
    p.add_argument("--backlog", type=int, default=10_000)
    p.add_argument("--congestion", default=None)
    p.add_argument("--timeout", type=float, default=30.0)
    p = sub.add_parser("echo")
    p.add_argument("--bind", required=True)
    p.add_argument("--timeout", type=float, default=60.0)
    p = sub.add_parser("ping")
    p.add_argument("--to", required=True)
    p.add_argument("--count", type=int, default=200)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--interval", type=float, default=0.005)
    p.add_argument("--linger", type=float, default=1.0)
    p = sub.add_parser("pmtu")
    p.add_argument("--to", required=True)
    p.add_argument("--size", type=int, default=1400)
    p.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args(args_list)
    verbs = {"tcp-recv": _tcp_recv, "tcp-send": _tcp_send, "purelink-send": _purelink_send,
             "tcp-sink": _tcp_sink, "tcp-flow": _tcp_flow, "purelink-flow": _purelink_flow,
             "echo": _echo, "ping": _ping, "pmtu": _pmtu}  # fmt: skip
    return verbs[args.verb](args)


if __name__ == "__main__":
    sys.exit(main())
