"""The compiled ledger (src/speedups/ledger.c) makes the pure ledger's decisions, step for step.

Why: which datagrams an answer acked, which RACK declared lost and which
losses proved spurious, the RTT samples and the one RateSample per answer
feed congestion control and pacing; a difference would change how fast a link
sends.  Two ledgers are driven through the same seeded sends, resends,
answers and timeouts, one with the C loops and one with the Python ones, and
everything they hand their policies is compared after every step.  Then
whole seeded simulations (a sender and a listener through a bad network, on
virtual time) run once with the compiled packer and ledger and once with the
pure ones, and every datagram on the wire must be the same.
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.sim import records_for
from purelink import native
from purelink.protocol import packing, recovery, sender, wire
from purelink.protocol.congestion import RateSample, create
from purelink.protocol.recovery import InFlight, RttEstimator
from purelink.protocol.sender_config import SenderStats
from purelink.testing import FakeNet, NetConfig, Simulation

core = native.part("ledger")
pytestmark = pytest.mark.skipif(
    core is None or native.part("pack") is None, reason=native.reason or "no compiled ledger"
)


@contextmanager
def pure() -> Iterator[None]:
    """The pure-Python packer and ledger, for what runs inside."""
    saved = recovery._core, sender.Packer, packing.Flight
    recovery._core, sender.Packer, packing.Flight = (  # type: ignore[misc]
        None, packing.PurePacker, packing.PureFlight,
    )  # fmt: skip
    try:
        yield
    finally:
        recovery._core, sender.Packer, packing.Flight = saved  # type: ignore[misc]


class Side:
    """One ledger with its policies, and what it handed them."""

    def __init__(self, cc: str, compiled: bool) -> None:
        self.compiled = compiled
        self.rtt = RttEstimator()
        self.stats = SenderStats()
        self.cc = create(cc, 1400, 7)
        self.ledger = InFlight(self.cc, self.rtt, self.stats)
        self.samples: list[tuple[Any, ...]] = []
        on_ack = self.cc.on_ack

        def spy(sample: RateSample, now: float) -> None:
            self.samples.append(dataclasses.astuple(sample))
            on_ack(sample, now)

        self.cc.on_ack = spy  # type: ignore[method-assign]
        self.made: list[Any] = []

    def run(self, step: tuple[Any, ...], rng: random.Random) -> None:
        if self.compiled:
            self._run(step, rng)
        else:
            with pure():
                self._run(step, rng)

    def _run(self, step: tuple[Any, ...], rng: random.Random) -> None:
        ledger, kind = self.ledger, step[0]
        if kind == "send":
            new = {f.pn: f for f in step[1]}
            self.made.extend(new.values())
            ledger.sent_all(new, step[2])
        elif kind == "resend":
            if ledger.lost:
                f = ledger.lost.popleft()
                old_pn, old_sent = f.pn, f.sent
                f.pn, f.sent = step[1], step[2]
                ledger.resent(old_pn, old_sent, f, step[2], True)
        elif kind == "ack":
            ledger.on_ack(step[1], step[2], step[3], step[4])
        elif kind == "timeout":
            ledger.detect_losses(step[1])
        elif kind == "clear":
            ledger.clear()

    def state(self) -> tuple[Any, ...]:
        led, rate, rack = self.ledger, self.ledger.rate, self.ledger.rack
        return (
            [(pn, _flight(f)) for pn, f in led.flights.items()],
            [_flight(f) for f in led.lost],
            led.bytes, led._retx, led.loss_time, led._largest_pn,
            (rate.delivered, rate.delivered_time, rate.first_sent, rate.app_limited),
            (rack.pn, rack.sent, rack.rtt, rack.mult, rack.spurious),
            (self.rtt.srtt, self.rtt.rttvar, self.rtt.min_rtt, self.rtt.samples),
            dataclasses.astuple(self.stats), self.cc.cwnd, self.cc.pacing_rate, self.samples,
        )  # fmt: skip


def _flight(f: Any) -> tuple[Any, ...]:
    return tuple(
        getattr(f, name)
        for name in (
            "pn", "first", "last", "size", "sent", "offset", "end", "retx", "delivered",
            "delivered_time", "first_sent", "app_limited",
        )
    )  # fmt: skip


def script(seed: int, steps: int) -> Iterator[tuple[str, Any]]:
    """A seeded run of sends, resends, answers and timeouts, as steps that make
    each side's own objects (flights are made anew for each side)."""
    rng = random.Random(seed)
    now, pn, seq = 0.0, 0, 1
    sent: list[tuple[int, int, int, int, int]] = []  # pn, first, last, offset, end
    for _ in range(steps):
        now += rng.choice((0.0, 0.0001, 0.001, 0.01, 0.05))
        roll = rng.random()
        if roll < 0.4:
            specs = []
            for _ in range(rng.randrange(1, 12)):
                pn += 1
                if rng.random() < 0.3:  # pieces of one batch
                    k = rng.randrange(3)
                    specs.append((pn, seq, seq + 9, 1360 * k, 1360 * (k + 1), 1400))
                    seq += 10 if k == 2 else 0
                else:
                    n = rng.randrange(1, 20)
                    specs.append((pn, seq, seq + n - 1, 0, 0, rng.randrange(100, 1400)))
                    seq += n
            sent.extend(s[:5] for s in specs)
            yield "send", (specs, now)
        elif roll < 0.5:
            pn += 1
            yield "resend", (pn, now)
        elif roll < 0.9 and sent:
            ack = _answer(rng, sent, pn)
            received = max(rng.choice((0, sent[-1][1])), ack.received)
            # the link's flag: the answer covers every record sent so far
            yield "ack", (ack, received, received >= max(s[2] for s in sent), now)
        elif roll < 0.98:
            yield "timeout", (now,)
        else:
            yield "clear", ()


def _answer(rng: random.Random, sent: list[tuple[int, ...]], pn: int) -> wire.Ack:
    received = rng.choice((0, sent[rng.randrange(len(sent))][2]))
    ranges, frags = [], []
    for _ in range(rng.choice((0, 0, 1, 3))):
        first = sent[rng.randrange(len(sent))][1]
        if first > received + 1:
            ranges.append((first, first + rng.randrange(0, 40)))
    for _ in range(rng.choice((0, 0, 1, 2))):
        s = sent[rng.randrange(len(sent))]
        spans = tuple((a, a + rng.choice((1360, 2720, 9000))) for a in (0, 1360, 2720)[:2])
        frags.append((s[1], spans[: rng.randrange(1, 3)]))
    dups = tuple(rng.randrange(1, pn + 1) for _ in range(rng.choice((0, 0, 1))))
    largest = rng.choice((pn, max(pn - rng.randrange(0, 10), 1), sent[-1][0]))
    return wire.Ack(
        7, 1, received, received, 1 << 20, largest, rng.randrange(0, 3000),
        tuple(ranges), tuple(frags), dups,
    )  # fmt: skip


def _make(step: tuple[str, Any], flight_type: Any) -> tuple[Any, ...]:
    kind, args = step
    if kind == "send":
        specs, now = args
        flights = [
            flight_type(p, first, last, size, now, bytes(8), offset, end)
            for p, first, last, offset, end, size in specs
        ]
        return (kind, flights, now)
    if kind == "ack":
        ack, received, everything, now = args
        return (kind, ack, received, everything, now)
    return (kind, *args)


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2**32), st.sampled_from(["bbr", "newreno"]), st.integers(1, 120))
def test_the_same_decisions_step_by_step(seed: int, cc: str, steps: int) -> None:
    fast, slow = Side(cc, True), Side(cc, False)
    rng_f, rng_s = random.Random(seed), random.Random(seed)
    for step in script(seed, steps):
        fast.run(_make(step, core.Flight), rng_f)  # type: ignore[union-attr]
        slow.run(_make(step, packing.PureFlight), rng_s)
        assert fast.state() == slow.state(), step


def test_the_all_received_walk_and_spans() -> None:
    """An answer that covers everything sent resolves copies whose own answer
    never came; fragment spans resolve pieces by byte range."""
    sides = [Side("newreno", True), Side("newreno", False)]
    for side, tp in zip(sides, (core.Flight, packing.PureFlight), strict=True):  # type: ignore[union-attr]
        flights = [tp(p, 1, 5, 1400, 0.1 * p, b"", 1360 * (p - 1), 1360 * p) for p in (1, 2, 3)]
        flights.append(tp(4, 6, 9, 900, 0.4, b""))
        side.run(("send", flights, 0.0), random.Random(0))
        ack = wire.Ack(7, 0, 0, 0, 1 << 20, 2, 10, (), ((1, ((0, 1360), (2720, 4080))),), ())
        side.run(("ack", ack, 0, False, 1.0), random.Random(0))
        ack = wire.Ack(7, 9, 9, 9, 1 << 20, 4, 10, (), (), ())
        side.run(("ack", ack, 9, True, 1.1), random.Random(0))
    assert sides[0].state() == sides[1].state()
    assert not sides[0].ledger.flights and sides[0].ledger.bytes == 0


def test_declines_what_it_was_not_written_for() -> None:
    assert core is not None
    side = Side("newreno", True)
    side.run(("send", [packing.PureFlight(1, 1, 1, 100, 0.0, b"")], 0.0), random.Random(0))
    assert core.ledger_lost(side.ledger.flights, 5, 0.1, 1.0) is NotImplemented
    ack = wire.Ack(7, 1, 1, 1, 1 << 20, 1, 0, (), (), ())
    assert core.ledger_acked(side.ledger, ack, 1, True, 1.0) is NotImplemented
    for other in (packing.PureFlight(2, 2, 2, 9, 0.0, b""), core.Flight(2, 2, 2, 9, 0.0, b"")):
        other.retx = True  # a retransmission is InFlight.resent's, one at a time
        got = core.ledger_sent({2: other}, side.ledger.flights, 100, 0, 0.0, 0.0, False)
        assert got is NotImplemented
    bad = wire.Ack(7, 1, 1, 1, 1 << 20, 1, 0, (("x", 1),), (), ())  # type: ignore[arg-type]
    assert core.ledger_acked(side.ledger, bad, 1, True, 1.0) is NotImplemented
    assert side.ledger.bytes == 100  # declining changed nothing
    side.ledger.on_ack(ack, 1, True, 1.0)  # the Python loop did it
    assert side.ledger.bytes == 0
    with pytest.raises(TypeError):
        core.ledger_lost([], 5, 0.1, 1.0)  # type: ignore[arg-type]


def _trace(seed: int, compiled: bool) -> list[tuple[Any, ...]]:
    """Every datagram a seeded simulation puts on the wire, and the end state."""
    rng = random.Random(seed)
    ids = random.Random(seed + 1)
    real = os.urandom
    os.urandom = ids.randbytes  # conn ids, cookies' keys: seeded
    try:
        if compiled:
            return _simulate(rng)
        with pure():
            return _simulate(rng)
    finally:
        os.urandom = real


def _simulate(rng: random.Random) -> list[tuple[Any, ...]]:
    loss = rng.choice((0.0, 0.05, 0.2))
    pmtu = rng.random() < 0.5  # path MTU discovery, on a path narrower than the link's size
    mtu = rng.choice((1250, 1300, None)) if pmtu else None
    net = FakeNet(
        rng.randrange(1 << 30),
        NetConfig(loss=loss, duplicate=0.05, delay=0.002, jitter=rng.choice((0.0, 0.02)), mtu=mtu),
        NetConfig(loss=loss, duplicate=0.05, delay=0.002, jitter=0.01),
    )
    sim = Simulation(net, sync_interval=rng.choice((0.0, 0.002)))
    trace: list[tuple[Any, ...]] = []
    send = net.send

    def spy(data: bytes, source: Any, dest: Any, now: float, up: bool) -> None:
        trace.append((now, up, bytes(data)))
        send(data, source, dest, now, up=up)

    net.send = spy  # type: ignore[method-assign]
    links = []
    for k in range(rng.randrange(1, 3)):
        links.append(
            sim.add_link(
                "s",
                records_for(rng, rng.randrange(50, 600), large=True),
                producer=f"p{k}",
                push_every=rng.choice((0, 7, 50)),
                datagram_size=1400 if pmtu else rng.choice((200, 1400)),
                congestion=rng.choice(("bbr", "newreno")),
                pmtu=pmtu,
            )
        )
    assert sim.run(sim.all_done, max_time=600)
    for link in links:
        trace.append(("stats", dataclasses.astuple(link.sender.stats), link.sender.cc.cwnd))
    return trace


@pytest.mark.parametrize("seed", range(12))
def test_simulations_give_identical_traces(seed: int) -> None:
    compiled, python = _trace(seed, True), _trace(seed, False)
    assert len(compiled) == len(python)
    assert compiled == python
