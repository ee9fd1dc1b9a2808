"""How often the listener answers a datagram session (core_answers.py).

Why it exists: the ACK-frequency policy trades answers for CPU, and each
case that must still be answered at once (a gap, reordering, a duplicate,
a PROBE, a sync, a session's first answers) is a promise the link's loss
detection and probes rely on.  The core is stepped by hand; the paced path
runs in virtual time through a FakeNet bottleneck.
"""

from __future__ import annotations

from purelink.protocol import wire
from purelink.protocol.core_answers import QUICK_ANSWERS
from purelink.protocol.listener_core import CoreConfig, ListenerCore
from purelink.protocol.messages import ACK_EVERY, MAX_ACK_DELAY
from purelink.protocol.recovery import ANSWER_DELAY
from purelink.protocol.sender import SenderState
from purelink.testing import FakeNet, MemoryStore, NetConfig, Simulation
from test_listener_core import ADDR, handshake

NOW = 100.0


class Session:
    """One open session of a core and the next seq and packet number to send."""

    def __init__(self, core: ListenerCore) -> None:
        self.core = core
        self.accept = handshake(core, NOW)
        self.seq = 1
        self.pn = 1

    def batch(self, seq: int) -> bytes:
        return wire.encode_batch(self.accept.producer, self.accept.epoch, seq, [b"r%d" % seq])

    def send(self, now: float, *, seq: int | None = None, pn: int | None = None) -> None:
        """One DATA datagram (the next one unless told otherwise)."""
        seq = self.seq if seq is None else seq
        pn = self.pn if pn is None else pn
        self.core.receive_datagram(
            wire.encode_data(self.accept.conn_id, pn, self.batch(seq)), ADDR, now
        )
        self.seq = max(self.seq, seq + 1)
        self.pn = max(self.pn, pn + 1)

    def answers(self, now: float) -> list[wire.Ack]:
        out = [wire.decode_datagram(data) for data, _ in self.core.datagrams_to_send(now)]
        return [m for m in out if isinstance(m, wire.Ack)]

    def past_quick_answers(self) -> float:
        """Send and answer one datagram at a time until answers may be held."""
        now = NOW
        for _ in range(QUICK_ANSWERS):
            self.send(now)
            assert len(self.answers(now)) == 1
            now += 0.001
        return now


def open_session(config: CoreConfig | None = None) -> tuple[Session, float]:
    s = Session(ListenerCore(MemoryStore(), config))
    return s, s.past_quick_answers()


def test_the_first_answers_go_out_at_once() -> None:
    s = Session(ListenerCore(MemoryStore()))
    for i in range(QUICK_ANSWERS):
        s.send(NOW + i)
        (ack,) = s.answers(NOW + i)
        assert ack.received == i + 1
    s.send(NOW + 100)
    assert s.answers(NOW + 100) == []  # the next one waits for a second datagram


def test_every_second_datagram_is_answered_and_a_lone_one_within_the_delay() -> None:
    s, now = open_session()
    assert ACK_EVERY == 2
    s.send(now)
    assert s.answers(now) == []
    assert abs(s.core.timeout(now) - MAX_ACK_DELAY) < 1e-9
    s.send(now + 0.0005)
    (ack,) = s.answers(now + 0.0005)
    assert ack.received == s.seq - 1 and ack.largest_pn == s.pn - 1
    assert s.core.timeout(now + 0.0005) == -1.0  # nothing held: no timer
    # a lone datagram: held, then answered when the delay is up, the hold reported
    s.send(now + 0.01)
    assert s.answers(now + 0.01) == []
    assert s.answers(now + 0.01 + MAX_ACK_DELAY / 2) == []
    (ack,) = s.answers(now + 0.01 + MAX_ACK_DELAY)
    assert ack.received == s.seq - 1
    assert abs(ack.ack_delay - MAX_ACK_DELAY * 1e6) <= 1


def test_a_gap_its_filling_and_what_arrives_meanwhile_are_answered_at_once() -> None:
    s, now = open_session()
    gap = s.seq
    s.send(now, seq=gap + 1, pn=s.pn + 1)  # the datagram before it was lost
    (ack,) = s.answers(now)
    assert ack.received == gap - 1 and ack.ranges == ((gap + 1, gap + 1),)
    s.send(now + 0.001, seq=gap + 2)  # in pn order, but the gap is still open
    (ack,) = s.answers(now + 0.001)
    assert ack.ranges == ((gap + 1, gap + 2),)
    s.send(now + 0.002, seq=gap)  # the repair
    (ack,) = s.answers(now + 0.002)
    assert ack.received == gap + 2 and ack.ranges == ()


def test_reordering_by_packet_number_is_answered_at_once() -> None:
    s, now = open_session()
    seq, pn = s.seq, s.pn
    s.send(now, seq=seq, pn=pn + 1)  # pn skipped: the one before it may be lost
    assert len(s.answers(now)) == 1
    s.send(now + 0.001, seq=seq + 1, pn=pn)  # and here it is, late
    (ack,) = s.answers(now + 0.001)
    assert ack.received == seq + 1


def test_a_duplicate_is_answered_at_once_and_named() -> None:
    s, now = open_session()
    s.send(now, seq=s.seq - 1)  # a copy of data already received
    (ack,) = s.answers(now)
    assert ack.duplicates == (s.pn - 1,)


def test_a_probe_is_answered_at_once() -> None:
    s, now = open_session()
    a = s.accept
    s.core.receive_datagram(wire.encode_probe(a.conn_id, s.pn, a.epoch), ADDR, now)
    (ack,) = s.answers(now)
    assert ack.largest_pn == s.pn


def test_a_sync_that_stores_records_is_answered_at_once() -> None:
    s, now = open_session()
    s.send(now)
    assert s.answers(now) == []  # held for the next datagram
    s.core.take_writes()
    s.core.written("s", s.seq - 1)
    s.core.synced("s", s.seq - 1)
    (ack,) = s.answers(now + 0.0001)
    assert ack.stored == s.seq - 1 == ack.received


def test_ack_every_one_answers_every_drain() -> None:
    s, now = open_session(CoreConfig(ack_every=1))
    for i in range(5):
        s.send(now + i * 0.001)
        assert len(s.answers(now + i * 0.001)) == 1


def paced(mbit: float, rtt: float, config: CoreConfig | None, megabytes: float = 3.0) -> Simulation:
    """One link ships `megabytes` through a bottleneck.  Syncs every 10 ms, so
    that the answers their syncs owe (one each) stay a small share."""
    rate = mbit * 1e6 / 8
    net = FakeNet(3, NetConfig(delay=rtt / 2, rate=rate), NetConfig(delay=rtt / 2))
    sim = Simulation(net, sync_interval=0.01, core_config=config)
    sim.add_link("s", [b"x" * 1000] * int(megabytes * 1000), anonymous_id=(1 << 63) | 77)
    assert sim.run(sim.all_done, max_time=60)
    return sim


def test_a_paced_path_gets_about_one_answer_per_two_datagrams() -> None:
    # 10 MB: the start-up (its answers are never held, and its losses open gaps
    # that are answered at once) is a small part of the transfer
    every = paced(50, 0.05, CoreConfig(ack_every=1), 10.0)
    second = paced(50, 0.05, None, 10.0)
    (a,) = every.links.values()
    (b,) = second.links.values()
    assert every.core is not None and second.core is not None
    per_every = every.core.stats.acks / a.sender.stats.datagrams
    per_second = second.core.stats.acks / b.sender.stats.datagrams
    assert per_every > 0.9  # a paced flow: one datagram per drain
    assert 0.4 < per_second < 0.6, per_second
    # the same transfer, no slower, and no probe or spurious resend for a held answer
    assert second.clock.now - every.clock.now < 0.05
    assert b.sender.stats.probes == 0 and b.sender.stats.spurious == 0


def test_a_held_answer_makes_no_probe_and_leaves_the_rtt_alone() -> None:
    # records one at a time, 100 ms apart, on a 50 ms path with no bottleneck and
    # syncs slow enough that the held answer goes out on its own first
    rtt = 0.05
    net = FakeNet(5, NetConfig(delay=rtt / 2), NetConfig(delay=rtt / 2))
    sim = Simulation(net, sync_interval=0.02)
    link = sim.add_link("s", [], anonymous_id=(1 << 63) | 78)
    s = link.sender
    core = sim.core
    assert core is not None
    answer = core.datagrams_to_send
    delays: list[int] = []  # ack_delay of each answer that named a packet

    def watched(now: float) -> list[tuple[bytes, tuple[str, int]]]:
        out = answer(now)
        for data, _ in out:
            msg = wire.decode_datagram(data)
            if isinstance(msg, wire.Ack) and msg.largest_pn:
                delays.append(msg.ack_delay)
        return out

    core.datagrams_to_send = watched  # type: ignore[method-assign]
    assert sim.run(lambda: s.state == SenderState.OPEN, max_time=5)
    for i in range(QUICK_ANSWERS + 20):
        s.push([b"lone %d" % i])
        assert sim.run(lambda: s.stored == s.pushed, max_time=1)
        due = sim.clock.now + 0.1
        sim.run(lambda due=due: sim.clock.now >= due, max_time=1)  # type: ignore[misc]
    # the first answers (each record also gets its sync's) at once, then every
    # lone datagram's answer is held for the delay
    quick = QUICK_ANSWERS // 2
    assert delays[:quick] == [0] * quick, delays
    assert all(abs(d - MAX_ACK_DELAY * 1e6) <= 1 for d in delays[quick:]), delays
    assert len(delays) >= quick + 20
    assert s.stats.probes == 0 and s.stats.retransmits == 0
    assert abs(s.rtt.latest - rtt) < 0.0005, s.rtt.latest
    assert abs(s.rtt.srtt - rtt) < 0.0005, s.rtt.srtt
    assert MAX_ACK_DELAY < ANSWER_DELAY < s.rtt.tail_pto - rtt
