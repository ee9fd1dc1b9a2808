"""The path emulator's decisions (bench/_pathmodel.py) on a hand-stepped clock.

Why it exists: the emulator's figures are only worth what its model is --
when a packet is released, what the bottleneck's queue admits, how often it
loses or duplicates, when it is dark, what it does to a packet over the MTU.
These tests drive the sans-IO model with explicit times and seeded RNGs: no
devices, no sleeps.  The end-to-end test on real TUN devices is
tests/test_paths.py (slow, root).
"""

from __future__ import annotations

import itertools
import struct
import sys
from pathlib import Path as FsPath

import pytest

# bench/ is a package of the checkout, not of the installed distribution
sys.path.insert(0, str(FsPath(__file__).resolve().parents[1]))

from bench._pathmodel import (
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


def test_a_packet_leaves_after_the_delay_not_before() -> None:
    p = path(delay=0.025)
    p.arrive(A_TO_B, b"x" * 100, 1.0)
    assert p.next_release() == pytest.approx(1.025)
    assert p.due(1.0249) == []
    [(side, packet, at)] = p.due(1.025)
    assert (side, packet, at) == (B_TO_A, b"x" * 100, pytest.approx(1.025))
    assert p.directions[A_TO_B].stats.delivered == 1


def test_the_bottleneck_serialises_at_its_rate_and_its_queue_drops_the_tail() -> None:
    # 1 Mbit/s: a 1,250-byte packet takes 10 ms; the queue holds 4 of them
    p = path(rate=1e6, queue_bytes=5000)
    for _ in range(10):
        p.arrive(A_TO_B, b"q" * 1250, 0.0)
    d = p.directions[A_TO_B].stats
    assert d.queue_drops == 6
    assert [round(at, 6) for _, _, at in p.due(1.0)] == [0.01, 0.02, 0.03, 0.04]
    # 20 ms later two have left: there is room for exactly two more
    p2 = path(rate=1e6, queue_bytes=5000)
    for _ in range(4):
        p2.arrive(A_TO_B, b"q" * 1250, 0.0)
    for _ in range(3):
        p2.arrive(A_TO_B, b"q" * 1250, 0.02)
    assert p2.directions[A_TO_B].stats.queue_drops == 1
    assert p2.directions[A_TO_B].stats.max_backlog == 5000


def test_a_bottleneck_without_a_queue_limit_delays_but_never_drops() -> None:
    p = path(rate=8e6, delay=0.01)
    for _ in range(100):
        p.arrive(A_TO_B, b"z" * 1000, 0.0)
    times = [at for _, _, at in p.due(10.0)]
    assert len(times) == 100
    assert times[-1] == pytest.approx(0.01 + 100 * 0.001)


@pytest.mark.parametrize("loss", [0.001, 0.01, 0.05, 0.10])
def test_random_loss_happens_at_its_rate(loss: float) -> None:
    p = path(loss=loss)
    n = 200_000
    for i in range(n):
        p.arrive(A_TO_B, b"l", i * 1e-6)
    lost = p.directions[A_TO_B].stats.lost
    sigma = (n * loss * (1 - loss)) ** 0.5
    assert abs(lost - n * loss) < 5 * sigma
    assert len(p.due(1.0)) == n - lost


def test_duplicates_are_extra_copies_at_their_rate() -> None:
    p = path(duplicate=0.05)
    n = 50_000
    for i in range(n):
        p.arrive(A_TO_B, i.to_bytes(4, "big"), 0.0)
    out = [pkt for _, pkt, _ in p.due(1.0)]
    dup = p.directions[A_TO_B].stats.duplicated
    assert abs(dup - 0.05 * n) < 5 * (n * 0.05 * 0.95) ** 0.5
    assert len(out) == n + dup
    assert len(set(out)) == n


def test_jitter_keeps_every_delay_in_its_band_and_reorders() -> None:
    p = path(delay=0.025, jitter=0.002)
    sent = {}
    for i in range(5000):
        packet = i.to_bytes(4, "big")
        sent[packet] = i * 0.0002  # 5,000 packets/s: closer together than the jitter
        p.arrive(A_TO_B, packet, sent[packet])
    out = p.due(100.0)
    delays = [at - sent[pkt] for _, pkt, at in out]
    assert min(delays) >= 0.023 - 1e-9 and max(delays) <= 0.027 + 1e-9
    assert max(delays) - min(delays) > 0.0035  # the band is used, not one value
    order = [int.from_bytes(pkt, "big") for _, pkt, _ in out]
    reordered = sum(1 for a, b in itertools.pairwise(order) if b < a)
    assert reordered > 500


def test_without_jitter_nothing_reorders() -> None:
    p = path(delay=0.025, rate=50e6)
    for i in range(2000):
        p.arrive(A_TO_B, i.to_bytes(4, "big") * 300, i * 0.0001)
    order = [int.from_bytes(pkt[:4], "big") for _, pkt, _ in p.due(100.0)]
    assert order == sorted(order) and len(order) == 2000


def test_blackouts_drop_everything_while_dark_and_nothing_otherwise() -> None:
    p = path(blackout_every=6.0, blackout_for=1.5, blackout_first=1.0)
    p.reset(100.0)  # the schedule counts from the reset
    times = [100.0 + k * 0.01 for k in range(1400)]  # 14 s
    for t in times:
        p.arrive(A_TO_B, b"b", t)
    delivered = {at for _, _, at in p.due(1e9)}
    for t in times:
        rel = t - 100.0
        dark = (1.0 <= rel < 2.5) or (7.0 <= rel < 8.5) or (13.0 <= rel < 14.5)
        assert (t not in delivered) == dark, rel
    assert p.directions[A_TO_B].stats.blackout_drops == sum(
        1 for t in times if p.directions[A_TO_B].dark(t)
    )


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
    st = p.directions[A_TO_B].stats
    assert (st.mtu_drops, st.icmp_sent) == (1, 1)


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
    assert p.directions[A_TO_B].stats.fragmented == 1
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
        {"blackout_every": 1.0, "blackout_for": 1.0},
    ],
)
def test_impossible_impairments_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Impairment(**bad)  # type: ignore[arg-type]


def test_impairments_round_trip_through_json_and_unknown_fields_are_refused() -> None:
    imp = Impairment(delay=0.025, loss=0.01, mtu=1280, blackout_every=6, blackout_for=1.5)
    assert Impairment.from_json(imp.to_json()) == imp
    with pytest.raises(ValueError, match="unknown"):
        Impairment.from_json({"delay": 0.1, "latency": 3})
