"""The path emulator's decisions, sans-IO: what happens to each IP packet.

Why it exists: `bench/pathemu.py` moves IP packets between two TUN devices
(two network namespaces) and must decide, for every packet, whether it is
lost, duplicated, queued or dropped at the bottleneck, too big for the MTU,
caught in a blackout, and when it comes out.  Those decisions live here,
with the clock passed in and the randomness seeded, so unit tests drive them
with a fake clock and no devices (tests/test_pathemu_model.py), and the
router loop stays a thin driver: read, `arrive`, sleep until `next_release`,
write what `due` hands back.

Model of one direction (what netem does, in this order):

1. **blackout**: every `blackout_every` s, starting `blackout_first` s after
   the epoch (`reset`), the path is dark for `blackout_for` s; every packet
   that arrives then is dropped;
2. **MTU**: an IPv4 packet longer than `mtu` with DF set is dropped and an
   ICMP "fragmentation needed" (type 3 code 4, RFC 1191) carrying the MTU
   goes back to its sender at once; one without DF is fragmented, as a router
   does; anything else too long is dropped;
3. **loss**: dropped with probability `loss` (independent draws);
4. **duplication**: with probability `duplicate` a second copy follows it;
5. **bottleneck**: a link of `rate` bit/s behind a drop-tail FIFO of
   `queue_bytes`: the backlog is (busy_until - now) * rate; a packet that
   does not fit is dropped, else it leaves the link at busy_until + its
   serialisation time;
6. **delay and jitter**: it is delivered `delay` + uniform(-jitter, +jitter)
   seconds (at least 0) after it left the bottleneck; packets with different
   draws overtake each other, so jitter reorders, as on a real path with
   parallel links.

A `Path` holds two directions and one heap of release times (ordered by
time, then arrival), and hands out (side, packet) pairs when they are due.
"""

from __future__ import annotations

import heapq
import random
import struct
from dataclasses import dataclass, fields

__all__ = [
    "A_TO_B",
    "B_TO_A",
    "Direction",
    "DirectionStats",
    "Impairment",
    "Path",
    "checksum",
    "frag_needed_ipv4",
    "fragment_ipv4",
]

A_TO_B = 0
"""Packets read from side A's TUN device, written to side B's."""
B_TO_A = 1
"""Packets read from side B's TUN device, written to side A's."""

ICMP_QUOTE = 548
"""Bytes of the offending packet an ICMP error quotes (576 - 20 - 8, RFC 1812)."""


@dataclass(frozen=True)
class Impairment:
    """What one direction of the path does to packets (0 = off)."""

    delay: float = 0.0
    """One-way propagation delay, s."""
    jitter: float = 0.0
    """Each packet's delay is `delay` + uniform(-jitter, +jitter), s (so packets reorder)."""
    loss: float = 0.0
    """Probability that a packet is dropped (independent)."""
    duplicate: float = 0.0
    """Probability that a packet is delivered twice."""
    rate: float = 0.0
    """Bottleneck rate, bit/s of IP packets; 0 = unlimited."""
    queue_bytes: int = 0
    """Drop-tail queue in front of the bottleneck, bytes; 0 = unbounded."""
    mtu: int = 0
    """Largest IP packet passed, bytes; 0 = no limit."""
    blackout_every: float = 0.0
    """A blackout starts every this many seconds; 0 = never."""
    blackout_for: float = 0.0
    """How long each blackout lasts, s."""
    blackout_first: float = 0.0
    """When the first blackout starts, s after the epoch."""

    def __post_init__(self) -> None:
        for name in ("loss", "duplicate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be a probability, got {getattr(self, name)}")
        for f in fields(self):
            if getattr(self, f.name) < 0:
                raise ValueError(f"{f.name} must not be negative")
        if self.mtu and self.mtu < 68:
            raise ValueError(f"mtu {self.mtu} is below IPv4's minimum of 68")
        if self.blackout_every and self.blackout_for >= self.blackout_every:
            raise ValueError("blackout_for must be shorter than blackout_every")

    def to_json(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: dict[str, float]) -> Impairment:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown impairment fields: {', '.join(sorted(unknown))}")
        return cls(**data)  # type: ignore[arg-type]


@dataclass
class DirectionStats:
    """Counters of one direction since the last reset."""

    packets: int = 0
    """Packets that arrived."""
    bytes: int = 0
    """Bytes that arrived."""
    delivered: int = 0
    """Packets handed out by `Path.due` (duplicates and fragments included)."""
    lost: int = 0
    """Dropped by the random loss."""
    duplicated: int = 0
    """Extra copies made."""
    queue_drops: int = 0
    """Dropped because the bottleneck's queue was full."""
    blackout_drops: int = 0
    """Dropped during a blackout."""
    mtu_drops: int = 0
    """Dropped for being over the MTU."""
    icmp_sent: int = 0
    """ICMP "fragmentation needed" messages sent back."""
    fragmented: int = 0
    """Packets without DF split into fragments."""
    max_backlog: int = 0
    """Largest bottleneck backlog seen, bytes."""

    def to_json(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def checksum(data: bytes | bytearray | memoryview) -> int:
    """The Internet checksum (RFC 1071) of `data`."""
    if len(data) % 2:
        data = bytes(data) + b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _ipv4_header(
    length: int,
    ident: int,
    flags_offset: int,
    ttl: int,
    proto: int,
    src: bytes,
    dst: bytes,
    tos: int = 0,
) -> bytearray:
    header = bytearray(
        struct.pack(
            "!BBHHHBBH4s4s", 0x45, tos, length, ident, flags_offset, ttl, proto, 0, src, dst
        )
    )
    struct.pack_into("!H", header, 10, checksum(header))
    return header


def frag_needed_ipv4(packet: bytes, mtu: int, router: bytes) -> bytes | None:
    """An ICMP "fragmentation needed" for `packet`, from `router` (4 bytes) to its
    sender, saying `mtu`; None if `packet` is not IPv4 or deserves no error (a
    fragment other than the first, or an ICMP error itself)."""
    if len(packet) < 20 or packet[0] >> 4 != 4:
        return None
    ihl = (packet[0] & 0x0F) * 4
    offset = struct.unpack_from("!H", packet, 6)[0] & 0x1FFF
    if offset:  # RFC 1812 4.3.2.7: only about the first fragment
        return None
    if packet[9] == 1 and len(packet) > ihl and packet[ihl] in (3, 4, 5, 11, 12):
        return None  # never an ICMP error about an ICMP error
    quote = packet[:ICMP_QUOTE]
    icmp = bytearray(struct.pack("!BBHHH", 3, 4, 0, 0, mtu) + quote)
    struct.pack_into("!H", icmp, 2, checksum(icmp))
    src = packet[12:16]
    # precedence "internetwork control" (0xC0), as routers send their errors
    header = _ipv4_header(20 + len(icmp), 0, 0, 64, 1, router, src, tos=0xC0)
    return bytes(header + icmp)


def fragment_ipv4(packet: bytes, mtu: int) -> list[bytes] | None:
    """`packet` (IPv4, DF clear) split into fragments of at most `mtu` bytes
    (RFC 791); None where it cannot be (options present, MTU too small)."""
    ihl = (packet[0] & 0x0F) * 4
    if ihl != 20 or mtu < 28:
        return None
    ident, flags_offset = struct.unpack_from("!HH", packet, 4)
    more = flags_offset & 0x2000
    base = flags_offset & 0x1FFF
    ttl, proto = packet[8], packet[9]
    src, dst = packet[12:16], packet[16:20]
    payload = memoryview(packet)[20:]
    step = (mtu - 20) // 8 * 8
    out = []
    for start in range(0, len(payload), step):
        chunk = payload[start : start + step]
        last = start + step >= len(payload)
        fo = (base + start // 8) | (more if last else 0x2000)
        out.append(bytes(_ipv4_header(20 + len(chunk), ident, fo, ttl, proto, src, dst)) + chunk)
    return out


class Direction:
    """One direction of the path: `arrive` says what happens to a packet.

    It returns the (release time, packet) pairs to deliver, and appends
    packets for the opposite side (ICMP errors) to `replies`.
    """

    def __init__(self, imp: Impairment, rng: random.Random, router: bytes, now: float) -> None:
        self.imp = imp
        self.rng = rng
        self.router = router
        """The IPv4 address ICMP errors come from (4 bytes)."""
        self.epoch = now
        self.busy_until = now
        self.stats = DirectionStats()

    def reset(self, now: float) -> None:
        """Start the blackout schedule at `now` and clear the counters."""
        self.epoch = now
        self.busy_until = now
        self.stats = DirectionStats()

    def dark(self, now: float) -> bool:
        """Whether `now` falls in a blackout."""
        imp = self.imp
        if not imp.blackout_every:
            return False
        t = now - self.epoch - imp.blackout_first
        return t >= 0 and t % imp.blackout_every < imp.blackout_for

    def arrive(self, packet: bytes, now: float, replies: list[bytes]) -> list[tuple[float, bytes]]:
        """What becomes of `packet` arriving at `now`: the copies to deliver and when."""
        imp, st = self.imp, self.stats
        st.packets += 1
        st.bytes += len(packet)
        if imp.blackout_every and self.dark(now):
            st.blackout_drops += 1
            return []
        pieces = [packet]
        if imp.mtu and len(packet) > imp.mtu:
            pieces = self._too_big(packet, replies) or []
            if not pieces:
                return []
        rng = self.rng
        if imp.loss and rng.random() < imp.loss:
            st.lost += 1
            return []
        copies = 1
        if imp.duplicate and rng.random() < imp.duplicate:
            st.duplicated += 1
            copies = 2
        out = []
        for _ in range(copies):
            for piece in pieces:
                left = self._bottleneck(len(piece), now)
                if left is None:
                    st.queue_drops += 1
                    continue
                delay = imp.delay
                if imp.jitter:
                    delay = max(0.0, delay + rng.uniform(-imp.jitter, imp.jitter))
                out.append((left + delay, piece))
        return out

    def _too_big(self, packet: bytes, replies: list[bytes]) -> list[bytes] | None:
        st, mtu = self.stats, self.imp.mtu
        is_v4 = len(packet) >= 20 and packet[0] >> 4 == 4
        if is_v4 and not packet[6] & 0x40:  # DF clear: fragment, as a router does
            pieces = fragment_ipv4(packet, mtu)
            if pieces:
                st.fragmented += 1
                return pieces
        st.mtu_drops += 1
        if is_v4:
            icmp = frag_needed_ipv4(packet, mtu, self.router)
            if icmp is not None:
                st.icmp_sent += 1
                replies.append(icmp)
        return None

    def _bottleneck(self, size: int, now: float) -> float | None:
        """When a packet of `size` bytes leaves the bottleneck; None if its queue is full."""
        imp = self.imp
        if not imp.rate:
            return now
        start = max(now, self.busy_until)
        backlog = int((start - now) * imp.rate / 8)
        if imp.queue_bytes and backlog + size > imp.queue_bytes:
            return None
        self.stats.max_backlog = max(self.stats.max_backlog, backlog + size)
        self.busy_until = start + size * 8 / imp.rate
        return self.busy_until


class Path:
    """Both directions of the emulated path and the packets in flight.

    `arrive(side, packet, now)` takes a packet read from `side`'s device;
    `next_release()` is when the next one is due; `due(now)` pops every
    packet due by `now` as (side to write it to, packet, when it was due).
    """

    def __init__(
        self,
        forward: Impairment,
        reverse: Impairment,
        now: float,
        seed: int = 1,
        router: bytes = bytes([10, 77, 255, 254]),
    ) -> None:
        rng = random.Random(seed)
        self.directions = (
            Direction(forward, random.Random(rng.getrandbits(64)), router, now),
            Direction(reverse, random.Random(rng.getrandbits(64)), router, now),
        )
        self._heap: list[tuple[float, int, int, bytes]] = []
        self._order = 0

    def reset(self, now: float) -> None:
        """Restart the blackout schedule at `now`, clear counters; packets in flight stay."""
        for d in self.directions:
            d.reset(now)

    def flush(self) -> int:
        """Forget every packet in flight; how many there were."""
        n = len(self._heap)
        self._heap.clear()
        return n

    def arrive(self, side: int, packet: bytes, now: float) -> None:
        replies: list[bytes] = []
        heap, push = self._heap, heapq.heappush
        out = 1 - side
        for at, piece in self.directions[side].arrive(packet, now, replies):
            self._order += 1
            push(heap, (at, self._order, out, piece))
        for reply in replies:  # an ICMP error goes straight back to the sender
            self._order += 1
            push(heap, (now, self._order, side, reply))

    def next_release(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def in_flight(self) -> int:
        return len(self._heap)

    def due(self, now: float) -> list[tuple[int, bytes, float]]:
        heap, pop = self._heap, heapq.heappop
        out = []
        while heap and heap[0][0] <= now:
            at, _, side, packet = pop(heap)
            out.append((side, packet, at))
            # counted on the direction the packet travels (ICMP replies on theirs)
            self.directions[1 - side].stats.delivered += 1
        return out
