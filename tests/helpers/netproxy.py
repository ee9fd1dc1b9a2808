"""A terrible network on loopback: a seeded UDP proxy, and a garbage sender.

Why it exists: the simulation (purelink.testing) proves the protocol on
virtual time, but only real sockets, a real `purelink serve` process and
real time prove the drivers, the kernel buffers and the store together.
`NetProxy` sits between links and a listener and, per direction, puts each
datagram through the same path model as the simulation's FakeNet and the
TUN emulator (`purelink.testing.PathModel`: blackout, MTU, loss,
duplication, bottleneck, delay and jitter, one seeded RNG per direction),
with counters of every fault it injected.  `Garbage` fires junk at a
listener from sockets of its own while the real traffic flows.

Shape (after trio's FakeNet, on real sockets): one thread owns every socket.
Links send to the proxy's front socket; the listener answers the source
address it sees, so the proxy keeps one upstream socket per client address,
as a NAT does, and relays what comes back on it to that client.  A datagram
the model delays waits in a heap ordered by release time, so a later
datagram with a shorter delay overtakes an earlier one (reordering).  The
model is given each datagram in arrival order with the time it was read:
the same seed and the same traffic give the same faults.

Bounded in time and memory: delays are at most what the model's bottleneck
queue, `delay` and `jitter` add, blackouts last what they were asked for, at
most `max_queued` datagrams wait in the heap (beyond that they are dropped
and counted as `overflow`), and the thread stops by itself after `lifetime`
seconds even if a test forgets to close it.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import random
import selectors
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from types import TracebackType

from purelink.testing import NetConfig, PathModel, PathStats, seeded_rng

Address = tuple[str, int]
_RECV = 65536
_SOCKET_BUFFER = 8 << 20


@dataclass(frozen=True)
class Faults(NetConfig):
    """What one direction of the network does to each datagram: a NetConfig
    with no delay unless asked (loopback adds none of its own)."""

    delay: float = 0.0
    """Fixed delay, seconds."""


@dataclass
class DirectionStats(PathStats):
    """Counters of one direction (up: links to listener; down: the answers):
    the path model's (`packets` that reached the proxy, `lost`,
    `blackout_drops`, ...) and the proxy's own."""

    forwarded: int = 0
    """Datagrams sent on (copies included)."""
    delayed: int = 0
    """Datagrams (copies included) held back by a delay."""
    reordered: int = 0
    """Datagrams sent after one that reached the proxy later."""
    overflow: int = 0
    """Dropped because too many datagrams were waiting."""
    send_errors: int = 0
    """Sends the kernel refused (e.g. the listener is down)."""


@dataclass(frozen=True)
class ProxyStats:
    """A snapshot of a proxy's counters."""

    up: DirectionStats
    down: DirectionStats
    blackouts: int
    """Blackouts started."""
    clients: int
    """Client addresses seen (one upstream socket each)."""

    def faults(self) -> dict[str, int]:
        """Faults injected, by kind, both directions together."""
        kinds = {
            "lost": "lost",
            "blackout": "blackout_drops",
            "duplicated": "duplicated",
            "too_big": "mtu_drops",
            "queue_drops": "queue_drops",
            "delayed": "delayed",
            "reordered": "reordered",
        }
        return {k: getattr(self.up, f) + getattr(self.down, f) for k, f in kinds.items()}


@dataclass(order=True)
class _Waiting:
    due: float
    order: int
    up: bool = field(compare=False)
    arrival: int = field(compare=False)
    data: bytes = field(compare=False)
    client: Address = field(compare=False)


class _Direction:
    """The model of one direction and what only the proxy counts."""

    def __init__(self, config: NetConfig, rng: random.Random) -> None:
        self.model = PathModel(config, rng)
        self.stats = DirectionStats()
        """The proxy's own counters (the model's are merged in by `snapshot`)."""
        self.arrivals = 0
        self.highest_sent = 0

    def snapshot(self) -> DirectionStats:
        return replace(self.stats, **self.model.stats.to_json())


class NetProxy:
    """A seeded bad network between UDP clients and one upstream address."""

    def __init__(
        self,
        upstream: Address,
        *,
        seed: int,
        up: Faults | None = None,
        down: Faults | None = None,
        blackout_every: tuple[float, float] | None = None,
        lifetime: float = 600.0,
        max_queued: int = 200_000,
        max_clients: int = 4096,
        capture: int = 4096,
        host: str = "127.0.0.1",
    ) -> None:
        """`blackout_every=(period, duration)`: every `period` seconds from
        start() the network is dark for its last `duration` seconds."""
        if blackout_every is not None and not 0 < blackout_every[1] < blackout_every[0]:
            raise ValueError("blackout_every needs 0 < duration < period")
        self.upstream = upstream
        up = up or Faults()
        down = down or up
        if blackout_every is not None:
            period, duration = blackout_every
            schedule = {
                "blackout_every": period,
                "blackout_for": duration,
                "blackout_first": period - duration,
            }
            up, down = replace(up, **schedule), replace(down, **schedule)
        self._up = _Direction(up, seeded_rng(seed, "up"))
        self._down = _Direction(down, seeded_rng(seed, "down"))
        self._lifetime = lifetime
        self._max_queued = max_queued
        self._max_clients = max_clients
        self._front = _udp_socket(host)
        self.address: Address = self._front.getsockname()[:2]
        """Where links send to."""
        self._host = host
        self._nat: dict[Address, socket.socket] = {}
        self._client_of: dict[int, Address] = {}
        self._waiting: list[_Waiting] = []
        self._order = itertools.count()
        self._captured: deque[tuple[bool, bytes]] = deque(maxlen=capture)
        self._lock = threading.Lock()
        self._blackouts = 0
        self._started = 0.0
        self._stop = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self._run, name="netproxy", daemon=True)
        self.error: BaseException | None = None
        """What stopped the proxy thread, if it died."""

    # ------------------------------------------------------------ control
    def start(self) -> NetProxy:
        self._started = time.monotonic()
        for d in (self._up, self._down):
            d.model.reset(self._started)  # the blackout schedule counts from here
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the thread and close every socket.  Idempotent."""
        self._stop = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread.is_alive():
            self._thread.join(10.0)
        for sock in (self._front, self._wake_r, self._wake_w, *self._nat.values()):
            sock.close()

    def __enter__(self) -> NetProxy:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def blackout(self, seconds: float) -> None:
        """Drop everything, both ways, for `seconds` from now."""
        with self._lock:
            for d in (self._up, self._down):
                d.model.dark_until = max(d.model.dark_until, time.monotonic() + seconds)
            self._blackouts += 1

    def stats(self) -> ProxyStats:
        """A snapshot of the counters."""
        with self._lock:
            return ProxyStats(
                up=self._up.snapshot(),
                down=self._down.snapshot(),
                blackouts=self._blackouts + self._up.model.blackouts(time.monotonic()),
                clients=len(self._nat),
            )

    def captured(self) -> list[tuple[bool, bytes]]:
        """Recent datagrams seen, as (up, bytes): material for `Garbage`."""
        with self._lock:
            return list(self._captured)

    # ------------------------------------------------------------ the thread
    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # pragma: no cover - reported by the tests
            self.error = exc

    def _loop(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._front, selectors.EVENT_READ, None)
        sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._sel = sel
        end = self._started + self._lifetime
        try:
            while not self._stop:
                now = time.monotonic()
                if now >= end:
                    return
                timeout = end - now
                if self._waiting:
                    timeout = min(timeout, max(self._waiting[0].due - now, 0.0))
                for key, _ in sel.select(timeout):
                    sock = key.fileobj
                    assert isinstance(sock, socket.socket)
                    if sock is self._wake_r:
                        with contextlib.suppress(OSError):
                            sock.recv(64)
                    elif sock is self._front:
                        self._drain(sock, up=True)
                    else:
                        self._drain(sock, up=False)
                self._release(time.monotonic())
        finally:
            sel.close()

    def _drain(self, sock: socket.socket, *, up: bool) -> None:
        for _ in range(1024):  # a fairness budget, like the listener's
            try:
                data, addr = sock.recvfrom(_RECV)
            except BlockingIOError:
                return
            except OSError:  # ICMP from a listener that is down: nothing to relay
                continue
            client = addr[:2] if up else self._client_of.get(sock.fileno())
            if client is None:
                continue
            if up and client not in self._nat and not self._open_nat(client):
                continue
            self._arrive(data, client, up=up)

    def _open_nat(self, client: Address) -> bool:
        if len(self._nat) >= self._max_clients:
            return False
        sock = _udp_socket(self._host)
        self._nat[client] = sock
        self._client_of[sock.fileno()] = client
        self._sel.register(sock, selectors.EVENT_READ, None)
        return True

    def _arrive(self, data: bytes, client: Address, *, up: bool) -> None:
        d = self._up if up else self._down
        now = time.monotonic()
        with self._lock:
            d.arrivals += 1
            self._captured.append((up, data))
            copies = d.model.arrive(data, now)
        stats = d.stats
        for due, copy in copies:
            if due <= now:
                self._send(up, d.arrivals, copy, client)
            elif len(self._waiting) >= self._max_queued:
                stats.overflow += 1
            else:
                stats.delayed += 1
                item = _Waiting(due, next(self._order), up, d.arrivals, copy, client)
                heapq.heappush(self._waiting, item)

    def _release(self, now: float) -> None:
        waiting = self._waiting
        while waiting and waiting[0].due <= now:
            item = heapq.heappop(waiting)
            self._send(item.up, item.arrival, item.data, item.client)

    def _send(self, up: bool, arrival: int, data: bytes, client: Address) -> None:
        d = self._up if up else self._down
        if arrival < d.highest_sent:
            d.stats.reordered += 1
        else:
            d.highest_sent = arrival
        try:
            if up:
                self._nat[client].sendto(data, self.upstream)
            else:
                self._front.sendto(data, client)
        except OSError:
            d.stats.send_errors += 1
            return
        d.stats.forwarded += 1


def _udp_socket(host: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setblocking(False)
    for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, option, _SOCKET_BUFFER)
    sock.bind((host, 0))
    return sock


# ---------------------------------------------------------------- garbage


@dataclass
class GarbageStats:
    """Junk sent, by kind."""

    random: int = 0
    """Random bytes, 0 to 1,500 of them."""
    flipped: int = 0
    """A captured datagram with one to eight bits flipped."""
    truncated: int = 0
    """A captured datagram cut short."""
    extended: int = 0
    """A captured datagram with random bytes appended."""
    replayed: int = 0
    """A captured datagram sent again unchanged, from another address."""

    @property
    def total(self) -> int:
        return self.random + self.flipped + self.truncated + self.extended + self.replayed


class Garbage:
    """A thread that fires junk at `target` from sockets of its own (on
    127.0.0.2 and up: other hosts than the links').

    Mutations start from datagrams the proxy captured, so they carry real
    magics, connection ids and epochs, and differ from the real thing by a
    few bits, a few bytes, or only by their source address.  Bounded: at most
    `max_datagrams`, at most `rate` per second, stops at close().
    """

    def __init__(
        self,
        target: Address,
        proxy: NetProxy | None,
        *,
        seed: int,
        rate: float = 2000.0,
        max_datagrams: int = 200_000,
        sockets: int = 4,
    ) -> None:
        self.target = target
        self._proxy = proxy
        self._rng = random.Random(f"{seed}/garbage")
        self._rate = rate
        self._max = max_datagrams
        # other hosts than the links' (127.0.0.1): junk is another sender's, and
        # the listener's per-host limits (handshakes) are not the links' to share
        self._socks = [_udp_socket(f"127.0.0.{2 + k}") for k in range(sockets)]
        self.stats = GarbageStats()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="garbage", daemon=True)

    def start(self) -> Garbage:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10.0)
        for sock in self._socks:
            sock.close()

    def __enter__(self) -> Garbage:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _run(self) -> None:
        rng = self._rng
        burst = 16
        pause = burst / self._rate
        sent = 0
        while sent < self._max and not self._stop.wait(pause):
            real = self._proxy.captured() if self._proxy is not None else []
            for _ in range(burst):
                data = self._one(rng, real)
                with contextlib.suppress(OSError):  # the listener may be down
                    rng.choice(self._socks).sendto(data, self.target)
                sent += 1

    def _one(self, rng: random.Random, real: list[tuple[bool, bytes]]) -> bytes:
        s = self.stats
        kind = rng.randrange(5) if real else 0
        if kind == 0:
            s.random += 1
            return rng.randbytes(rng.randrange(0, 1500))
        data = bytearray(rng.choice(real)[1])
        if kind == 1 and data:
            s.flipped += 1
            for _ in range(rng.randrange(1, 9)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            return bytes(data)
        if kind == 2 and data:
            s.truncated += 1
            return bytes(data[: rng.randrange(len(data))])
        if kind == 3:
            s.extended += 1
            return bytes(data) + rng.randbytes(rng.randrange(1, 64))
        s.replayed += 1
        return bytes(data)
