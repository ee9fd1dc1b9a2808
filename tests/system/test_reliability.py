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


def run(tmp_path: Path, sc: Scenario) -> dict[str, Any]:
    data = tmp_path / "data"
    plan = {tag: sc.records if tag == "api-1" else sc.records // 2 for tag in LINKS}
    srv = ServeProcess(data).start()
    listener = ("127.0.0.1", srv.port)
    proxy = NetProxy(
        listener, seed=sc.seed, up=sc.up, down=sc.down, blackout_every=sc.blackout_every
    ).start()
    garbage = Garbage(listener, proxy, seed=sc.seed).start()
    url = "udp://%s:%d" % proxy.address
    links: dict[str, purelink.Link] = {}
    stop = threading.Event()
    errors: list[BaseException] = []

    def feed() -> None:  # all records but each link's last, paced
        try:
            start = time.monotonic()
            sent = dict.fromkeys(plan, 0)
            while any(sent[t] < n - 1 for t, n in plan.items()) and not stop.is_set():
                share = min((time.monotonic() - start) / sc.seconds, 1.0)
                for tag, n in plan.items():
                    upto = int((n - 1) * share)
                    for i in range(sent[tag], upto):
                        links[tag].queue(payload(tag, i))
                    sent[tag] = max(sent[tag], upto)
                stop.wait(0.01)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    feeder = threading.Thread(target=feed, name="feeder")
    try:
        for tag, (stream, producer) in LINKS.items():
            try:
                links[tag] = purelink.connect(url, stream=stream, producer=producer, timeout=60)
            except purelink.ConnectError as exc:
                alive = srv.proc is not None and srv.proc.poll() is None
                raise AssertionError(
                    f"{tag}: {exc}; listener alive: {alive}; proxy: {proxy.error!r} "
                    f"{proxy.stats()}; garbage: {garbage.stats}"
                ) from exc
        started = time.monotonic()
        feeder.start()
        if sc.outage is not None:
            at, duration = sc.outage
            stop.wait(max(at - (time.monotonic() - started), 0))
            told = {tag: link.stored for tag, link in links.items()}
            if sc.outage_signal == signal.SIGKILL:
                srv.kill()
            else:
                assert srv.stop(sc.outage_signal) == 0
            stop.wait(duration)  # the outage itself: links keep queuing meanwhile
            for stream in ("orders", "events"):
                check_stream(data, stream, {t: told[t] for t in LINKS if LINKS[t][0] == stream})
            srv.restart()
        feeder.join(sc.seconds + 60)
        assert not errors, errors
        # the garbage stops before each link's last record goes out, so once
        # that record is stored every garbage datagram was drained before it
        garbage.close()
        for tag, n in plan.items():
            links[tag].queue(payload(tag, n - 1))
        for tag, link in links.items():
            assert link.wait_stored(timeout=sc.timeout), f"{tag}: {link!r} {link.stats()}"
        assert srv.proc is not None and srv.proc.poll() is None, "the listener stayed up"
        stats = {tag: link.stats() for tag, link in links.items()}
        for link in links.values():
            assert link.close(timeout=30)
    finally:
        stop.set()
        if feeder.is_alive():
            feeder.join(30)
        garbage.close()
        for link in links.values():
            link.close(timeout=0)
        proxy.close()
        if srv.proc is not None:
            srv.stop()
        print("listener stats at stop:", srv.last_stats)  # shown when the test fails
    assert proxy.error is None, proxy.error
    served = srv.last_stats
    assert served is not None
    for stream in ("orders", "events"):
        check_stream(data, stream, {t: plan[t] for t in LINKS if LINKS[t][0] == stream}, exact=True)
    assert purelink.Store(data).streams() == ["events", "orders"], "no stream that no link made"
    assert served["fenced"] == 0, "no valid link was fenced"
    reconnects = sum(s.reconnects for s in stats.values())
    if sc.outage is None:
        assert reconnects == 0, {t: s.reconnects for t, s in stats.items()}
        assert served["sessions"] == len(LINKS)
        # every junk datagram was counted: dropped by reason, or answered with a RETRY
        accounted = sum(served["dropped"].values()) + served["retries"]
        assert accounted >= garbage.stats.total, (served["dropped"], garbage.stats)
    else:
        assert all(s.reconnects >= 1 for s in stats.values()), stats
    faults = proxy.stats()
    return {
        "records": sum(plan.values()),
        "faults": faults.faults(),
        "blackouts": faults.blackouts,
        "garbage": {**garbage.stats.__dict__, "total": garbage.stats.total},
        "dropped": served["dropped"],
        "reconnects": reconnects,
        "retransmits": sum(s.retransmits for s in stats.values()),
        "violations": 0,
    }


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
