"""The path emulator's own part of the path model (bench/paths/model.py) on a
hand-stepped clock.

Why it exists: the emulator's figures are only worth what its model is.
The physics (delay, jitter, bottleneck, loss, duplicates, blackouts, their
order) is `purelink.testing.PathModel`'s, tested in tests/sim/test_pathmodel.py;
here is what the router adds on top: impairments in its units, what it does
to an IPv4 packet over the MTU (ICMP "fragmentation needed", fragments), and
its two directions sharing one heap of release times.  Explicit times and
seeded RNGs: no devices, no sleeps.  The end-to-end test on real TUN devices
is bench/tests/test_paths.py (slow, root).
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path as FsPath

import pytest

# bench/ is a package of the checkout, not of the installed distribution
sys.path.insert(0, str(FsPath(__file__).resolve().parents[2]))

from bench.paths.model import (
    A_TO_B,
    B_TO_A,
    Impairment,
    Path,
    checksum,
    frag_needed_ipv4,
    fragment_ipv4,
)

SRC = bytes([10, 77, 0, 1])
DST = bytes([10, 77, 1, 1])
ROUTER = bytes([10, 77, 255, 254])


def ipv4(size: int, df: bool = True, ident: int = 7, proto: int = 17) -> bytes:
    """An IPv4 packet of `size` bytes with a valid header checksum."""
    header = bytearray(
        struct.pack(
            "!BBHHHBBH4s4s", 0x45, 0, size, ident, 0x4000 if df else 0, 64, proto, 0, SRC, DST
        )
    )
    struct.pack_into("!H", header, 10, checksum(header))
    body = bytes(i % 251 for i in range(size - 20))
    return bytes(header) + body


def path(**kw: float) -> Path:
    imp = Impairment(**kw)  # type: ignore[arg-type]
    return Path(imp, imp, now=0.0, seed=3, router=ROUTER)


def test_the_queue_drops_are_counted_per_ip_protocol() -> None:
    # 1 Mbit/s and 2 packets of queue: the tail of each burst is dropped,
    # and the counters say whose packets they were
    p = path(rate=1e6, queue_bytes=2500)
    for _ in range(3):
        p.arrive(A_TO_B, ipv4(1250, proto=6), 0.0)
    for _ in range(2):
        p.arrive(A_TO_B, ipv4(1250, proto=17), 0.0)
    p.arrive(A_TO_B, ipv4(1250, proto=17), 0.05)
    p.arrive(A_TO_B, b"\x00junk", 0.05)
    protocols = p.stats(A_TO_B)["protocols"]
    assert protocols == {
        "tcp": {"packets": 3, "queue_drops": 1},
        "udp": {"packets": 3, "queue_drops": 2},
        "other": {"packets": 1, "queue_drops": 0},
    }
    assert p.stats(A_TO_B)["queue_drops"] == 3 and p.stats(B_TO_A)["protocols"] == {}
    p.reset(1.0)
    assert p.stats(A_TO_B)["protocols"] == {}


def test_a_packet_leaves_after_the_delay_not_before_on_the_other_side() -> None:
    p = path(delay=0.025)
    p.arrive(A_TO_B, b"x" * 100, 1.0)
    assert p.next_release() == pytest.approx(1.025) and p.in_flight() == 1
    assert p.due(1.0249) == []
    [(side, packet, at)] = p.due(1.025)
    assert (side, packet, at) == (B_TO_A, b"x" * 100, pytest.approx(1.025))
    assert p.stats(A_TO_B)["delivered"] == 1 and p.stats(B_TO_A)["delivered"] == 0


def test_the_rate_is_in_bits_and_a_zero_queue_is_unbounded() -> None:
    # 1 Mbit/s: a 1,250-byte packet takes 10 ms; the queue holds 4 of them
    p = path(rate=1e6, queue_bytes=5000)
    for _ in range(10):
        p.arrive(A_TO_B, b"q" * 1250, 0.0)
    assert p.stats(A_TO_B)["queue_drops"] == 6 and p.stats(A_TO_B)["max_backlog"] == 5000
    assert [round(at, 6) for _, _, at in p.due(1.0)] == [0.01, 0.02, 0.03, 0.04]
    free = path(rate=8e6, delay=0.01)
    for _ in range(100):
        free.arrive(A_TO_B, b"z" * 1000, 0.0)
    out = [at for _, _, at in free.due(10.0)]
    assert len(out) == 100 and out[-1] == pytest.approx(0.01 + 100 * 0.001)


def test_the_routers_jitter_spreads_both_ways_and_each_direction_has_its_own() -> None:
    """Each packet's delay is 25 ms +- 2 ms (uniform: netem's draw), and the
    reverse direction's draws are its own, not a copy of the forward's."""
    p = path(delay=0.025, jitter=0.002)
    sent = {}
    for i in range(2000):
        sent[i] = i * 0.0002
        p.arrive(A_TO_B, b"f" + i.to_bytes(2, "big"), sent[i])
        p.arrive(B_TO_A, b"r" + i.to_bytes(2, "big"), sent[i])
    delays: dict[bytes, dict[int, float]] = {b"f": {}, b"r": {}}
    for _, pkt, at in p.due(100.0):
        delays[pkt[:1]][int.from_bytes(pkt[1:], "big")] = at - sent[int.from_bytes(pkt[1:], "big")]
    forward = list(delays[b"f"].values())
    assert len(forward) == len(delays[b"r"]) == 2000
    assert 0.023 - 1e-9 <= min(forward) < 0.0231 and 0.0269 < max(forward) <= 0.027 + 1e-9
    assert sum(forward) / 2000 == pytest.approx(0.025, abs=0.0002)
    assert delays[b"f"] != delays[b"r"]


def test_blackouts_count_from_the_reset_in_both_directions() -> None:
    p = path(blackout_every=6.0, blackout_for=1.5, blackout_first=1.0)
    p.reset(100.0)
    for t, dark in [(100.99, False), (101.0, True), (102.49, True), (102.5, False), (107.2, True)]:
        assert [d.dark(t) for d in p.directions] == [dark, dark], t
        p.arrive(A_TO_B, b"b", t)
    assert p.stats(A_TO_B)["blackout_drops"] == 3 and len(p.due(1e9)) == 2
    p.reset(200.0)
    assert p.stats(A_TO_B)["blackout_drops"] == 0 and p.stats(A_TO_B)["delivered"] == 0


def test_a_df_packet_over_the_mtu_is_dropped_and_answered_with_frag_needed() -> None:
    p = path(mtu=1280)
    big = ipv4(1428)
    p.arrive(A_TO_B, big, 0.0)
    p.arrive(A_TO_B, ipv4(1280), 0.0)
    out = p.due(0.0)
    assert [(side, len(pkt)) for side, pkt, _ in out] == [(A_TO_B, 20 + 8 + 548), (B_TO_A, 1280)]
    icmp_packet = out[0][1]
    assert checksum(icmp_packet[:20]) == 0  # a valid IPv4 header
    assert icmp_packet[9] == 1 and icmp_packet[12:16] == ROUTER and icmp_packet[16:20] == SRC
    icmp = icmp_packet[20:]
    assert checksum(icmp) == 0
    kind, code, _, _, mtu = struct.unpack_from("!BBHHH", icmp)
    assert (kind, code, mtu) == (3, 4, 1280)
    assert icmp[8:] == big[:548]  # the offending header and the start of its payload
    st = p.stats(A_TO_B)
    assert (st["mtu_drops"], st["icmp_sent"], st["delivered"]) == (1, 1, 1)
    assert p.stats(B_TO_A)["delivered"] == 1  # the ICMP error, on the way back


def test_no_icmp_error_about_an_icmp_error_nor_a_later_fragment() -> None:
    error = bytearray(ipv4(1400, proto=1))
    error[20] = 3
    assert frag_needed_ipv4(bytes(error), 1280, ROUTER) is None
    later = bytearray(ipv4(1400))
    struct.pack_into("!H", later, 6, 0x4000 | 10)
    assert frag_needed_ipv4(bytes(later), 1280, ROUTER) is None
    assert frag_needed_ipv4(b"\x60" + b"\0" * 1400, 1280, ROUTER) is None  # IPv6: not here


def test_a_packet_without_df_over_the_mtu_is_fragmented_and_reassembles() -> None:
    p = path(mtu=576)
    original = ipv4(3000, df=False, ident=0x1234)
    p.arrive(A_TO_B, original, 0.0)
    frags = [pkt for _, pkt, _ in p.due(1.0)]
    assert len(frags) == 6 and all(len(f) <= 576 for f in frags)
    payload = bytearray()
    for k, f in enumerate(frags):
        assert checksum(f[:20]) == 0
        ident, flags_offset = struct.unpack_from("!HH", f, 4)
        assert ident == 0x1234
        assert bool(flags_offset & 0x2000) == (k < len(frags) - 1)
        assert (flags_offset & 0x1FFF) * 8 == len(payload)
        assert struct.unpack_from("!H", f, 2)[0] == len(f)
        payload += f[20:]
    assert bytes(payload) == original[20:]
    assert p.stats(A_TO_B)["fragmented"] == 1 and p.stats(A_TO_B)["delivered"] == 6
    assert fragment_ipv4(original, 20) is None


def test_a_non_ip_packet_over_the_mtu_is_dropped_without_an_answer() -> None:
    p = path(mtu=1280)
    p.arrive(A_TO_B, b"\x60" + b"\0" * 1400, 0.0)
    assert p.due(1.0) == []
    assert p.directions[A_TO_B].stats.mtu_drops == 1


def test_equal_release_times_keep_arrival_order_and_flush_empties() -> None:
    p = path(delay=0.01)
    for i in range(50):
        p.arrive(B_TO_A, bytes([i]), 0.0)
    assert [pkt[0] for _, pkt, _ in p.due(0.01)] == list(range(50))
    p.arrive(A_TO_B, b"left", 0.0)
    assert p.flush() == 1 and p.next_release() is None


def test_the_same_seed_gives_the_same_decisions() -> None:
    def run() -> list[float]:
        p = path(delay=0.02, jitter=0.005, loss=0.1, duplicate=0.1)
        for i in range(1000):
            p.arrive(A_TO_B, i.to_bytes(2, "big"), i * 0.001)
        return [at for _, _, at in p.due(100.0)]

    assert run() == run()


@pytest.mark.parametrize(
    "bad",
    [
        {"loss": 1.5},
        {"duplicate": -0.1},
        {"delay": -1.0},
        {"mtu": 40},
        {"queue_bytes": -1},
        {"blackout_every": 1.0, "blackout_for": 1.0},
    ],
)
def test_impossible_impairments_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        Impairment(**bad)  # type: ignore[arg-type]


def test_impairments_round_trip_through_json_and_unknown_fields_are_refused() -> None:
    imp = Impairment(delay=0.025, loss=0.01, mtu=1280, blackout_every=6, blackout_for=1.5)
    assert Impairment.from_json(imp.to_json()) == imp
    cfg = Impairment(rate=50e6, queue_bytes=0, mtu=0, jitter=0.002).model()
    assert (cfg.rate, cfg.queue, cfg.mtu, cfg.symmetric) == (6.25e6, None, None, True)
    with pytest.raises(ValueError, match="unknown"):
        Impairment.from_json({"delay": 0.1, "latency": 3})
