"""The congestion control's view in `link.stats()`, over real loopback sockets.

A udp:// link runs one of our controllers, and its stats must show what that
controller believes once records have crossed the path: BBR's bandwidth and
min RTT from real answers, read by the application thread while the link
thread feeds the controller.  A tcp:// link's congestion control is the
kernel's: its stats must say so, not show a model the link does not have.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import purelink
from helpers.tcp import tcp_url, wait_for
from purelink.protocol.congestion import Bbr, Cubic, NewReno

RECORDS = 5000
PHASES = {
    "bbr": {Bbr.STARTUP, Bbr.DRAIN, Bbr.PROBE_BW, Bbr.PROBE_RTT},
    "cubic": {Cubic.SLOW_START, Cubic.CONSERVATIVE, Cubic.AVOIDANCE, Cubic.RECOVERY},
    "newreno": {NewReno.SLOW_START, NewReno.AVOIDANCE, NewReno.RECOVERY},
}


def udp_url(lst: purelink.Listener) -> str:
    assert lst.udp_address is not None
    return "udp://%s:%d" % lst.udp_address


def ship(link: purelink.Link, count: int = RECORDS) -> None:
    for i in range(count):
        link.queue(b"record %06d" % i)
    assert link.wait_stored(timeout=30)


def test_a_bbr_link_shows_the_bandwidth_and_min_rtt_it_measured(tmp_path: Path) -> None:
    with (
        purelink.Listener(tmp_path / "data", udp="127.0.0.1:0") as listener,
        purelink.connect(udp_url(listener), stream="cc") as link,
    ):
        first = link.stats()
        assert (first.congestion, first.congestion_state) == ("bbr", Bbr.STARTUP)
        # alone on loopback: nothing shares the path, and BBR says so
        assert first.competing is False and first.cross_traffic == "none"
        seen: list[purelink.LinkStats] = []
        done = threading.Event()

        def watch() -> None:  # stats() from another thread while the link thread runs
            seen.append(link.stats())
            while not done.wait(0.0005):
                seen.append(link.stats())

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            ship(link)
        finally:
            done.set()
            watcher.join()
        # the answer that advanced `stored` may still be on its way into the
        # model when wait_stored returns: wait for the model, with a deadline
        assert wait_for(lambda: (link.stats().btl_bw or 0.0) > 0, timeout=10)
        stats = link.stats()
    assert stats.congestion == "bbr"
    assert stats.congestion_state in PHASES["bbr"]
    assert stats.btl_bw is not None and stats.btl_bw > 0
    assert stats.min_rtt is not None and 0 < stats.min_rtt < 1.0  # loopback
    assert stats.pacing_rate is not None and stats.pacing_rate > 0
    assert stats.cwnd > 0
    assert stats.competing is False and stats.cross_traffic == "none"
    assert seen and all(
        s.congestion == "bbr"
        and s.congestion_state in PHASES["bbr"]
        and s.btl_bw is not None
        and s.min_rtt is not None
        and s.min_rtt > 0  # the handshake's, from the first snapshot on
        for s in seen
    )


@pytest.mark.parametrize("congestion", ["cubic", "newreno"])
def test_a_loss_based_link_shows_its_phase_and_no_bandwidth(
    tmp_path: Path, congestion: str
) -> None:
    with (
        purelink.Listener(tmp_path / "data", udp="127.0.0.1:0") as listener,
        purelink.connect(udp_url(listener), stream="cc", congestion=congestion) as link,
    ):
        ship(link)
        stats = link.stats()
    assert stats.congestion == congestion
    assert stats.congestion_state in PHASES[congestion]
    assert stats.btl_bw is None  # neither keeps a model of the path's rate
    if congestion == "cubic":
        assert stats.min_rtt is not None and stats.min_rtt > 0  # the handshake's, at least
        assert stats.pacing_rate is not None and stats.pacing_rate > 0
    else:
        assert stats.min_rtt is None and stats.pacing_rate == 0.0
    assert stats.competing is None and stats.cross_traffic is None


def test_a_tcp_link_says_the_kernel_does_its_congestion_control(tmp_path: Path) -> None:
    with (
        purelink.Listener(tmp_path / "data", udp=None, tcp="127.0.0.1:0") as listener,
        purelink.connect(tcp_url(listener), stream="cc") as link,
    ):
        ship(link, 500)
        stats = link.stats()
    assert (stats.congestion, stats.congestion_state) == ("kernel", "")
    assert stats.btl_bw is None and stats.min_rtt is None and stats.pacing_rate is None
    assert stats.competing is None and stats.cross_traffic is None
    assert stats.cwnd > 0  # the link's own bound on bytes in flight, as before
