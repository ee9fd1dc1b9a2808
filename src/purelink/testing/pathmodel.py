"""One direction of a bad network path, sans-IO: what becomes of each datagram.

Why it exists: purelink is tested against bad paths three ways -- `FakeNet`
(virtual time, the sans-IO tests), the loopback proxy of the live tests
(tests/helpers/netproxy.py, real sockets) and the TUN router of `purelink bench
paths` (bench/paths/emu.py, real IP packets between two namespaces).  All
three hand every datagram to a `PathModel` and keep only what is theirs:
a clock, a heap of what is in flight, sockets or devices.  So a path means
the same thing in a unit test, on loopback and in the benchmark, and code
of one's own can be tested against the same physics (`purelink.testing`).

`PathModel.arrive(packet, now)` says what happens to one packet arriving
at `now`, in this order:

1. **blackout**: the path is dark until `dark_until` (a one-off outage the
   driver sets), and every `blackout_every` s for `blackout_for` s, the
   first starting `blackout_first` s after the model's epoch (`reset`);
   a packet that arrives in the dark is dropped;
2. **MTU**: a packet longer than `mtu` bytes goes to the `oversize` hook,
   which returns the pieces that go on (a router fragments, or answers with
   an ICMP error of its own); with no hook, or no pieces, it is dropped;
3. **loss**: dropped with probability `loss`, independently;
4. **duplication**: with probability `duplicate` a second copy follows it;
5. **bottleneck**: a link of `rate` bytes/s behind a drop-tail FIFO of
   `queue` bytes, shared by every sender of the direction: the backlog is
   (busy_until - now) x rate, in whole bytes; a copy that does not fit is
   dropped, else it leaves at busy_until + its size / rate;
6. **delay and jitter**: each copy comes out `delay` plus a uniform draw
   of up to `jitter` after it left the bottleneck: on top of the delay, or
   with `symmetric`, from `delay` - `jitter` to `delay` + `jitter` (never
   below 0) as netem draws it, so that the smallest round trip is well
   below the typical one.  Copies with different draws overtake each other:
   jitter is what reorders.

It returns the (release time, piece) pairs to deliver, in the order they
were decided (a driver's heap ordered by time, then arrival, keeps that
order among equal times).

Randomness: the driver passes one RNG per direction (`seeded_rng`), so the
traffic of one direction never moves the other's draws.  A packet draws
only for the impairments that are on: one draw for loss (a packet that got
past steps 1 and 2), one for duplication (one not lost), one per copy for
jitter.  The same configuration, seed and arrivals give the same decisions,
and a path with none of them draws nothing.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

__all__ = ["NetConfig", "Oversize", "PathModel", "PathStats", "seeded_rng"]

Oversize = Callable[[bytes, int], Sequence[bytes]]
"""What a router does with a packet over the MTU: (packet, mtu) -> the pieces
that go on ([] or () when it is dropped)."""

_NON_NEGATIVE = ("delay", "jitter", "rate", "blackout_every", "blackout_for", "blackout_first")


@dataclass(frozen=True)
class NetConfig:
    """How bad one direction of the path is (each impairment off at its default
    but the small `delay`)."""

    loss: float = 0.0
    """Probability that a datagram is dropped."""
    duplicate: float = 0.0
    """Probability that a datagram is delivered twice (each copy delayed on its own)."""
    delay: float = 0.0005
    """Fixed one-way delay, seconds."""
    jitter: float = 0.0
    """Extra uniform random delay up to this, seconds (this is what reorders)."""
    symmetric: bool = False
    """Jitter both ways: a delay drawn uniformly from `delay` - `jitter` to `delay`
    + `jitter` (at least 0), as netem and bench/paths/emu.py draw it, so the
    smallest round trip is well below the typical one; False: `delay` to
    `delay` + `jitter`, so the smallest is the propagation delay."""
    rate: float = 0.0
    """Bottleneck rate, bytes per second (0: no bottleneck)."""
    queue: int | None = 256 << 10
    """Bytes the bottleneck's drop-tail queue holds (with a rate); None: no limit."""
    mtu: int | None = None
    """Largest datagram (bytes) the path carries; larger ones go to the model's
    `oversize` hook, or are dropped.  None: no limit."""
    blackout_every: float = 0.0
    """A blackout starts every this many seconds (0: never)."""
    blackout_for: float = 0.0
    """How long each blackout lasts, seconds (less than `blackout_every`)."""
    blackout_first: float = 0.0
    """When the first blackout starts, seconds after the model's epoch."""

    def __post_init__(self) -> None:
        for name in ("loss", "duplicate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a probability from 0 to 1, got {value!r}")
        for name in _NON_NEGATIVE:
            value = getattr(self, name)
            if not 0.0 <= value < math.inf:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        for name in ("queue", "mtu"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int) and value > 0):
                raise ValueError(
                    f"{name} must be a positive number of bytes or None, got {value!r}"
                )
        if self.blackout_every:
            if not 0.0 < self.blackout_for < self.blackout_every:
                raise ValueError(
                    f"blackout_for must be above 0 and below blackout_every "
                    f"({self.blackout_every!r}), got {self.blackout_for!r}"
                )
        elif self.blackout_for or self.blackout_first:
            raise ValueError("blackout_for and blackout_first need a blackout_every")


@dataclass
class PathStats:
    """Counters of one direction since its model's last reset."""

    packets: int = 0
    """Packets that arrived."""
    bytes: int = 0
    """Bytes that arrived."""
    blackout_drops: int = 0
    """Dropped in a blackout."""
    mtu_drops: int = 0
    """Dropped for being over the MTU."""
    fragmented: int = 0
    """Over the MTU, and sent on in pieces by the `oversize` hook."""
    lost: int = 0
    """Dropped by the random loss."""
    duplicated: int = 0
    """Extra copies made."""
    queue_drops: int = 0
    """Copies dropped because the bottleneck's queue was full."""
    max_backlog: int = 0
    """Largest bottleneck backlog seen, bytes (the copy that was let in included)."""

    def to_json(self) -> dict[str, int]:
        """The counters by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def seeded_rng(seed: int | str, direction: str) -> random.Random:
    """The RNG of one direction of a path seeded with `seed` (independent of
    the other direction's, the same on every run and machine)."""
    return random.Random(f"{seed}/{direction}")


class PathModel:
    """One direction of a path: `arrive` says what happens to a packet (above)."""

    def __init__(
        self,
        config: NetConfig,
        rng: random.Random,
        epoch: float = 0.0,
        oversize: Oversize | None = None,
    ) -> None:
        self.config = config
        """What the direction does; a driver may replace it at any time (the
        bottleneck's backlog and the RNG carry on)."""
        self.rng = rng
        self.oversize = oversize
        """What becomes of a packet over the MTU (None: it is dropped)."""
        self.epoch = epoch
        """When the blackout schedule starts counting."""
        self.busy_until = epoch
        """When the bottleneck has sent everything queued in it."""
        self.dark_until = -math.inf
        """A one-off blackout: dark before this time (both ways, if the driver
        sets it on both directions)."""
        self.stats = PathStats()

    def reset(self, now: float) -> None:
        """Start the blackout schedule at `now`, empty the bottleneck, clear the counters."""
        self.epoch = now
        self.busy_until = now
        self.stats = PathStats()

    def dark(self, now: float) -> bool:
        """Whether `now` falls in a blackout."""
        if now < self.dark_until:
            return True
        cfg = self.config
        if not cfg.blackout_every:
            return False
        t = now - self.epoch - cfg.blackout_first
        return t >= 0.0 and t % cfg.blackout_every < cfg.blackout_for

    def blackouts(self, now: float) -> int:
        """How many of the scheduled blackouts have begun by `now`."""
        cfg = self.config
        t = now - self.epoch - cfg.blackout_first
        if not cfg.blackout_every or t < 0.0:
            return 0
        return int(t // cfg.blackout_every) + 1

    def arrive(self, packet: bytes, now: float) -> list[tuple[float, bytes]]:
        """What becomes of `packet` arriving at `now`: the copies to deliver and when."""
        cfg, st = self.config, self.stats
        size = len(packet)
        st.packets += 1
        st.bytes += size
        if now < self.dark_until or (cfg.blackout_every and self.dark(now)):
            st.blackout_drops += 1
            return []
        pieces: Sequence[bytes] = (packet,)
        mtu = cfg.mtu
        if mtu is not None and size > mtu:
            pieces = () if self.oversize is None else self.oversize(packet, mtu)
            if not pieces:
                st.mtu_drops += 1
                return []
            st.fragmented += 1
        rng = self.rng
        if cfg.loss and rng.random() < cfg.loss:
            st.lost += 1
            return []
        if cfg.duplicate and rng.random() < cfg.duplicate:
            st.duplicated += 1
            pieces = (*pieces, *pieces)
        rate, delay, jitter = cfg.rate, cfg.delay, cfg.jitter
        out = []
        for piece in pieces:
            at = now
            if rate:
                busy = self.busy_until
                start = busy if busy > now else now
                backlog = int((start - now) * rate) + len(piece)
                if cfg.queue is not None and backlog > cfg.queue:
                    st.queue_drops += 1
                    continue
                if backlog > st.max_backlog:  # noqa: PLR1730 -- per packet: no call
                    st.max_backlog = backlog
                at = self.busy_until = start + len(piece) / rate
            if not jitter:
                at += delay
            elif cfg.symmetric:
                wait = delay + (2.0 * rng.random() - 1.0) * jitter
                at += wait if wait > 0.0 else 0.0
            else:
                at += delay + rng.random() * jitter
            out.append((at, piece))
        return out
