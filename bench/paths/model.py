"""The path emulator's side of the path model: IP packets, ICMP, two directions.

Why it exists: `bench/paths/emu.py` moves IP packets between two TUN devices
(two network namespaces) and must decide, for every packet, whether it is
lost, duplicated, queued or dropped at the bottleneck, too big for the MTU,
caught in a blackout, and when it comes out.  Those decisions are
`purelink.testing.PathModel`'s, the one model FakeNet and the loopback
proxy of the tests drive too (its docstring gives the order: blackout, MTU,
loss, duplication, bottleneck, delay and jitter).  What is the router's own
lives here, sans-IO, tested on a fake clock in bench/tests/test_pathemu_model.py:

* `Impairment`, a direction in the emulator's units (rate in bit/s of IP
  packets, as tc states it; 0 for "off" everywhere, so it travels as JSON
  on the router's control pipe), turned into the model's `NetConfig` with
  jitter spread both ways, as netem draws it;
* what a router does with a packet over the MTU (the model's `oversize`
  hook): an IPv4 packet with DF set is dropped and an ICMP "fragmentation
  needed" (type 3 code 4, RFC 1191) carrying the MTU goes back to its sender
  at once; one without DF is fragmented; anything else is dropped;
* `Path`: both directions and one heap of release times (ordered by time,
  then arrival), handing out (side, packet) pairs when they are due.

The router loop stays a thin driver: read, `arrive`, sleep until
`next_release`, write what `due` hands back.
"""

from __future__ import annotations

import heapq
import struct
from dataclasses import dataclass, fields
from typing import Any

from purelink.testing.pathmodel import NetConfig, PathModel, seeded_rng

__all__ = [
    "A_TO_B",
    "B_TO_A",
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
IPV4_MIN_MTU = 68
"""The smallest MTU an IPv4 path may have (RFC 791)."""


@dataclass(frozen=True)
class Impairment:
    """What one direction of the emulated path does to packets (0 = off)."""

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
        if self.mtu and self.mtu < IPV4_MIN_MTU:
            raise ValueError(f"mtu {self.mtu} is below IPv4's minimum of {IPV4_MIN_MTU}")
        if self.queue_bytes < 0 or self.mtu < 0:
            raise ValueError("queue_bytes and mtu must not be negative (0 is off)")
        self.model()  # the model's own checks: probabilities, negative times, blackouts

    def model(self) -> NetConfig:
        """The path model's configuration of this direction."""
        return NetConfig(
            loss=self.loss,
            duplicate=self.duplicate,
            delay=self.delay,
            jitter=self.jitter,
            symmetric=True,
            rate=self.rate / 8,
            queue=self.queue_bytes or None,
            mtu=self.mtu or None,
            blackout_every=self.blackout_every,
            blackout_for=self.blackout_for,
            blackout_first=self.blackout_first,
        )

    def to_json(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: dict[str, float]) -> Impairment:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown impairment fields: {', '.join(sorted(unknown))}")
        return cls(**data)  # type: ignore[arg-type]


_PROTOCOLS = {6: "tcp", 17: "udp", 1: "icmp", 58: "icmpv6"}


def _protocol_name(number: int) -> str:
    """An IP protocol number by name ("tcp", "udp", ...), "ip-N" for another
    number, "other" for -1 (not an IPv4 or IPv6 packet, or a cut-off header)."""
    if number < 0:
        return "other"
    return _PROTOCOLS.get(number, f"ip-{number}")


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


class Path:
    """Both directions of the emulated path and the packets in flight.

    `arrive(side, packet, now)` takes a packet read from `side`'s device;
    `next_release()` is when the next one is due; `due(now)` pops every
    packet due by `now` as (side to write it to, packet, when it was due).
    `directions[side]` is the model of the packets read from `side`.
    """

    def __init__(
        self,
        forward: Impairment,
        reverse: Impairment,
        now: float,
        seed: int = 1,
        router: bytes = bytes([10, 77, 255, 254]),
    ) -> None:
        self.router = router
        """The IPv4 address ICMP errors come from (4 bytes)."""
        self.directions = (
            PathModel(forward.model(), seeded_rng(seed, "forward"), now, self._too_big),
            PathModel(reverse.model(), seeded_rng(seed, "reverse"), now, self._too_big),
        )
        self.delivered = [0, 0]
        """Per direction: packets handed out by `due` (duplicates and fragments included)."""
        self.icmp_sent = [0, 0]
        """Per direction: ICMP "fragmentation needed" messages sent back."""
        self.protocols: tuple[dict[int, list[int]], dict[int, list[int]]] = ({}, {})
        """Per direction: IP protocol number (-1: not IP) -> [packets read,
        pieces the bottleneck's drop-tail queue dropped (a fragmented packet
        is several)]: whose packets it drops (a paced flow and an unpaced one
        lose at different rates at one full buffer)."""
        self._replies: list[bytes] = []
        self._heap: list[tuple[float, int, int, bytes]] = []
        self._order = 0

    def reset(self, now: float) -> None:
        """Restart the blackout schedule at `now`, clear counters; packets in flight stay."""
        for d in self.directions:
            d.reset(now)
        self.delivered = [0, 0]
        self.icmp_sent = [0, 0]
        self.protocols = ({}, {})

    def stats(self, side: int) -> dict[str, Any]:
        """The counters of the direction of packets read from `side`."""
        return {
            **self.directions[side].stats.to_json(),
            "delivered": self.delivered[side],
            "icmp_sent": self.icmp_sent[side],
            "protocols": {
                _protocol_name(number): {"packets": n, "queue_drops": d}
                for number, (n, d) in sorted(self.protocols[side].items())
            },
        }

    def flush(self) -> int:
        """Forget every packet in flight; how many there were."""
        n = len(self._heap)
        self._heap.clear()
        return n

    def arrive(self, side: int, packet: bytes, now: float) -> None:
        heap, push = self._heap, heapq.heappush
        out = 1 - side
        order = self._order
        direction = self.directions[side]
        drops = direction.stats.queue_drops
        for at, piece in direction.arrive(packet, now):
            order += 1
            push(heap, (at, order, out, piece))
        replies = self._replies
        if replies:  # an ICMP error goes straight back to the sender
            self.icmp_sent[side] += len(replies)
            for reply in replies:
                order += 1
                push(heap, (now, order, side, reply))
            replies.clear()
        self._order = order
        version = packet[0] >> 4 if packet else 0  # per packet: no call
        if version == 4 and len(packet) >= 20:
            number = packet[9]
        elif version == 6 and len(packet) >= 40:
            number = packet[6]  # the first next header (no extension headers on these paths)
        else:
            number = -1
        counts = self.protocols[side].get(number)
        if counts is None:
            counts = self.protocols[side][number] = [0, 0]
        counts[0] += 1
        counts[1] += direction.stats.queue_drops - drops

    def _too_big(self, packet: bytes, mtu: int) -> list[bytes]:
        """The model's `oversize` hook: fragments to go on, or [] (and maybe an ICMP error)."""
        is_v4 = len(packet) >= 20 and packet[0] >> 4 == 4
        if is_v4 and not packet[6] & 0x40:  # DF clear: fragment, as a router does
            pieces = fragment_ipv4(packet, mtu)
            if pieces:
                return pieces
        if is_v4:
            icmp = frag_needed_ipv4(packet, mtu, self.router)
            if icmp is not None:
                self._replies.append(icmp)
        return []

    def next_release(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def in_flight(self) -> int:
        return len(self._heap)

    def due(self, now: float) -> list[tuple[int, bytes, float]]:
        heap, pop = self._heap, heapq.heappop
        delivered = self.delivered
        out = []
        while heap and heap[0][0] <= now:
            at, _, side, packet = pop(heap)
            out.append((side, packet, at))
            # counted on the direction the packet travels (ICMP replies on theirs)
            delivered[1 - side] += 1
        return out
