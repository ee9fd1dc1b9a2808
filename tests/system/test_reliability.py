"""Exactly once through a terrible network, end to end, with garbage on the side.

Why it exists: docs/reliability.md, guarantee 1 says loss, duplication, reordering and delay
never change what is stored, and section 7 says junk never hurts the valid
links.  Here real links talk to a real `purelink serve` process through
`netproxy.NetProxy` (seeded loss, duplicates, 20 ms of jitter, blackouts,
both directions), the listener is stopped and restarted on its port in the
middle of it, and all along `netproxy.Garbage` fires random bytes and
mutations of the captured traffic (flipped bits, truncations, extensions,
replays) at the listener from sockets of its own.

Every run ships three links over two streams (a named producer and an
anonymous one on "orders", an anonymous one on "events") and then checks:
each link's records are in the store once, byte-exact, in seq order, at
contiguous positions (shipping.check_stream); the store holds exactly those
two streams; no link was fenced or failed; the listener stayed up and
counted every garbage datagram as dropped (or answered with a RETRY).

The figures of each run go to $PURELINK_FIGURES when it is set (see
docs/reliability.md).
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import purelink
from helpers.netproxy import Faults, Garbage, NetProxy
from helpers.serve_process import ServeProcess
from helpers.shipping import check_stream, payload, report

LINKS = {"api-1": ("orders", "api-1"), "anon-a": ("orders", None), "anon-b": ("events", None)}
"""tag -> (stream, producer name or None for anonymous)."""


@dataclass(frozen=True)
class Scenario:
    """One end-to-end run."""

    seed: int
    up: Faults
    """Links to listener."""
    down: Faults | None = None
    """Listener to links (None: as up)."""
    blackout_every: tuple[float, float] | None = None
    """(period, duration) of the proxy's blackouts."""
    records: int = 4000
    """Records of the named link; each anonymous link ships half as many."""
    seconds: float = 2.0
    """Queueing is spread over this long, so faults hit a flowing stream."""
    outage: tuple[float, float] | None = None
    """(at, duration): the listener is stopped at `at` seconds, restarted on its
    port `duration` seconds later."""
    outage_signal: int = signal.SIGTERM
    timeout: float = 180.0
    """Deadline for everything to be told stored after the last record is queued."""


class EndToEnd:
    """One scenario's moving parts: the listener process, the faulty proxy in
    front of it, the garbage fired at it, the links, and the feeder thread
    that paces their records."""

    def __init__(self, tmp_path: Path, sc: Scenario) -> None:
        self.sc = sc
        self.data = tmp_path / "data"
        self.plan = {tag: sc.records if tag == "api-1" else sc.records // 2 for tag in LINKS}
        self.srv = ServeProcess(self.data).start()
        listener = ("127.0.0.1", self.srv.port)
        self.proxy = NetProxy(
            listener, seed=sc.seed, up=sc.up, down=sc.down, blackout_every=sc.blackout_every
        ).start()
        self.garbage = Garbage(listener, self.proxy, seed=sc.seed).start()
        self.url = "udp://%s:%d" % self.proxy.address
        self.links: dict[str, purelink.Link] = {}
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.feeder = threading.Thread(target=self._feed, name="feeder")

    def connect(self) -> None:
        """Open every link through the proxy; a failure says what each part was doing."""
        for tag, (stream, producer) in LINKS.items():
            try:
                self.links[tag] = purelink.connect(
                    self.url, stream=stream, producer=producer, timeout=60
                )
            except purelink.ConnectError as exc:
                alive = self.srv.proc is not None and self.srv.proc.poll() is None
                raise AssertionError(
                    f"{tag}: {exc}; listener alive: {alive}; proxy: {self.proxy.error!r} "
                    f"{self.proxy.stats()}; garbage: {self.garbage.stats}"
                ) from exc

    def _feed(self) -> None:  # all records but each link's last, paced
        try:
            start = time.monotonic()
            sent = dict.fromkeys(self.plan, 0)
            while any(sent[t] < n - 1 for t, n in self.plan.items()) and not self.stop.is_set():
                share = min((time.monotonic() - start) / self.sc.seconds, 1.0)
                for tag, n in self.plan.items():
                    upto = int((n - 1) * share)
                    for i in range(sent[tag], upto):
                        self.links[tag].queue(payload(tag, i))
                    sent[tag] = max(sent[tag], upto)
                self.stop.wait(0.01)
        except BaseException as exc:  # reported by the main thread
            self.errors.append(exc)

    def outage(self, started: float, at: float, duration: float) -> None:
        """At `at` seconds after `started`, stop the listener with the scenario's
        signal; check the store it left holds what the links were told; after
        `duration` seconds, restart it on its port."""
        self.stop.wait(max(at - (time.monotonic() - started), 0))
        told = {tag: link.stored for tag, link in self.links.items()}
        if self.sc.outage_signal == signal.SIGKILL:
            self.srv.kill()
        else:
            assert self.srv.stop(self.sc.outage_signal) == 0
        self.stop.wait(duration)  # the outage itself: links keep queuing meanwhile
        for stream in ("orders", "events"):
            check_stream(self.data, stream, {t: told[t] for t in LINKS if LINKS[t][0] == stream})
        self.srv.restart()

    def finish(self) -> dict[str, purelink.LinkStats]:
        """The feeder done and the garbage stopped, each link queues its last
        record and tells everything stored; the listener stayed up; the links
        close.  Returns their stats."""
        self.feeder.join(self.sc.seconds + 60)
        assert not self.errors, self.errors
        # the garbage stops before each link's last record goes out, so once
        # that record is stored every garbage datagram was drained before it
        self.garbage.close()
        for tag, n in self.plan.items():
            self.links[tag].queue(payload(tag, n - 1))
        for tag, link in self.links.items():
            assert link.wait_stored(timeout=self.sc.timeout), f"{tag}: {link!r} {link.stats()}"
        assert self.srv.proc is not None and self.srv.proc.poll() is None, "the listener stayed up"
        stats = {tag: link.stats() for tag, link in self.links.items()}
        for link in self.links.values():
            assert link.close(timeout=30)
        return stats

    def shut_down(self) -> None:
        """Stop the feeder, the garbage, the links, the proxy and the listener,
        whatever happened."""
        self.stop.set()
        if self.feeder.is_alive():
            self.feeder.join(30)
        self.garbage.close()
        for link in self.links.values():
            link.close(timeout=0)
        self.proxy.close()
        if self.srv.proc is not None:
            self.srv.stop()
        print("listener stats at stop:", self.srv.last_stats)  # shown when the test fails

    def check_store(self) -> None:
        """Each link's records are in the store once, in order; no other stream."""
        for stream in ("orders", "events"):
            shipped = {t: self.plan[t] for t in LINKS if LINKS[t][0] == stream}
            check_stream(self.data, stream, shipped, exact=True)
        assert purelink.Store(self.data).streams() == ["events", "orders"], (
            "no stream that no link made"
        )

    def check_listener(self, stats: dict[str, purelink.LinkStats]) -> dict[str, Any]:
        """No link was fenced; without an outage, one session per link and every
        garbage datagram counted; with one, every link reconnected.  Returns the
        listener's stats at stop."""
        served = self.srv.last_stats
        assert served is not None
        assert served["fenced"] == 0, "no valid link was fenced"
        if self.sc.outage is None:
            reconnects = sum(s.reconnects for s in stats.values())
            assert reconnects == 0, {t: s.reconnects for t, s in stats.items()}
            assert served["sessions"] == len(LINKS)
            # every junk datagram was counted: dropped by reason, or answered with a RETRY
            accounted = sum(served["dropped"].values()) + served["retries"]
            assert accounted >= self.garbage.stats.total, (served["dropped"], self.garbage.stats)
        else:
            assert all(s.reconnects >= 1 for s in stats.values()), stats
        return served

    def figures(
        self, stats: dict[str, purelink.LinkStats], served: dict[str, Any]
    ) -> dict[str, Any]:
        """What the run did, for docs/reliability.md."""
        faults = self.proxy.stats()
        return {
            "records": sum(self.plan.values()),
            "faults": faults.faults(),
            "blackouts": faults.blackouts,
            "garbage": {**self.garbage.stats.__dict__, "total": self.garbage.stats.total},
            "dropped": served["dropped"],
            "reconnects": sum(s.reconnects for s in stats.values()),
            "retransmits": sum(s.retransmits for s in stats.values()),
            "violations": 0,
        }


def run(tmp_path: Path, sc: Scenario) -> dict[str, Any]:
    """Ship every link's records through the scenario, then check it all;
    returns the run's figures."""
    e2e = EndToEnd(tmp_path, sc)
    try:
        e2e.connect()
        started = time.monotonic()
        e2e.feeder.start()
        if sc.outage is not None:
            e2e.outage(started, *sc.outage)
        stats = e2e.finish()
    finally:
        e2e.shut_down()
    assert e2e.proxy.error is None, e2e.proxy.error
    e2e.check_store()
    served = e2e.check_listener(stats)
    return e2e.figures(stats, served)


def jittery(loss: float) -> Faults:
    return Faults(loss=loss, duplicate=0.05, jitter=0.02)


@pytest.mark.parametrize(("loss", "records"), [(0.10, 4000), (0.30, 800)], ids=["loss10", "loss30"])
def test_loss_duplicates_jitter(tmp_path: Path, loss: float, records: int) -> None:
    figures = run(tmp_path, Scenario(seed=int(loss * 100), up=jittery(loss), records=records))
    assert figures["faults"]["lost"] > 0
    assert figures["faults"]["duplicated"] > 0
    assert figures["faults"]["reordered"] > 0
    assert figures["retransmits"] > 0
    report(f"test_loss_duplicates_jitter[loss{int(loss * 100)}]", figures)


def test_answers_lost_more_than_data(tmp_path: Path) -> None:
    sc = Scenario(seed=5, up=jittery(0.05), down=jittery(0.30), records=2000)
    report("test_answers_lost_more_than_data", run(tmp_path, sc))


def test_blackouts_longer_than_many_rtos(tmp_path: Path) -> None:
    sc = Scenario(seed=7, up=jittery(0.05), blackout_every=(3.0, 1.5), records=6000, seconds=6.5)
    figures = run(tmp_path, sc)
    assert figures["blackouts"] >= 2
    assert figures["faults"]["blackout"] > 0
    report("test_blackouts_longer_than_many_rtos", figures)


def test_listener_outage_5s(tmp_path: Path) -> None:
    sc = Scenario(seed=11, up=jittery(0.10), records=3000, seconds=3.0, outage=(1.0, 5.0))
    report("test_listener_outage_5s", run(tmp_path, sc))


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["term", "kill"])
def test_listener_outage_30s(tmp_path: Path, sig: signal.Signals) -> None:
    sc = Scenario(
        seed=13, up=jittery(0.10), records=8000, seconds=8.0, outage=(2.0, 30.0), outage_signal=sig
    )
    report(f"test_listener_outage_30s[{sig.name}]", run(tmp_path, sc))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("loss", "records"), [(0.10, 40_000), (0.30, 6000)], ids=["loss10", "loss30"]
)
def test_loss_duplicates_jitter_slow(tmp_path: Path, loss: float, records: int) -> None:
    sc = Scenario(seed=100 + int(loss * 100), up=jittery(loss), records=records, seconds=10.0)
    report(f"test_loss_duplicates_jitter_slow[loss{int(loss * 100)}]", run(tmp_path, sc))


@pytest.mark.slow
def test_blackouts_and_loss_slow(tmp_path: Path) -> None:
    sc = Scenario(
        seed=17, up=jittery(0.10), blackout_every=(4.0, 1.5), records=20_000, seconds=30.0
    )
    report("test_blackouts_and_loss_slow", run(tmp_path, sc))
