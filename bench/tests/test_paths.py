"""The path emulator end to end on real TUN devices and namespaces (slow, root).

Why it exists: `purelink bench paths` is only as honest as its emulator.
These tests run bench/paths/emu.py for real and check that each impairment
actually happens to real packets -- the delay within a tolerance, loss and
duplicates at their rates, jitter reorders, a blackout drops everything, the
MTU is enforced and the kernel learns it from the ICMP error -- that a small
purelink udp:// and tcp:// transfer through a bad path is stored exactly
once, and that nothing is left behind (namespaces, devices, processes), also
when the benchmark is stopped with SIGTERM.  The model itself is unit-tested
on a fake clock in bench/tests/test_pathemu_model.py.

Skipped, with the reason, where the machine cannot run it (not root, no
/dev/net/tun, no `ip`).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHECKOUT = Path(__file__).resolve().parents[2]
# bench/ is a package of the checkout, not of the installed distribution
sys.path.insert(0, str(CHECKOUT))

from bench.paths.constants import PEERS_MODULE  # noqa: E402
from bench.paths.emu import Emulator, available, sweep_stale  # noqa: E402
from bench.paths.model import Impairment  # noqa: E402
from bench.paths.peers import fixed_records  # noqa: E402
from bench.paths.transfers import Serve, run_plain_tcp, run_purelink  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(available() is not None, reason=f"path emulator: {available()}"),
]

B = "10.77.1.1"


def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False).stdout


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    with Emulator() as e:
        yield e


def peer(emu: Emulator, side: int, *argv: str, timeout: float = 60) -> dict[str, Any]:
    done = subprocess.run(
        emu.command(side, [sys.executable, "-m", PEERS_MODULE, *argv]),
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def echo(emu: Emulator) -> Iterator[None]:
    proc = subprocess.Popen(
        emu.command(
            1,
            [
                sys.executable,
                "-m",
                PEERS_MODULE,
                "echo",
                "--bind",
                f"{B}:9000",
                "--timeout",
                "600",
            ],
        ),
        cwd=CHECKOUT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield
    proc.kill()
    proc.wait()
    proc.stdout.close()


def ping(
    emu: Emulator,
    imp: Impairment,
    count: int,
    interval: float,
    size: int = 100,
    linger: float = 0.5,
) -> dict[str, Any]:
    emu.set(imp)
    emu.reset()
    return peer(
        emu,
        0,
        "ping",
        "--to",
        f"{B}:9000",
        "--count",
        str(count),
        "--interval",
        str(interval),
        "--size",
        str(size),
        "--linger",
        str(linger),
    )


def test_the_delay_is_what_was_asked_within_a_millisecond(emu: Emulator, echo: None) -> None:
    result = ping(emu, Impairment(delay=0.025), count=200, interval=0.005)
    rtts = sorted(result["rtt"])
    assert result["received"] == 200
    assert rtts[0] >= 0.050
    assert statistics.median(rtts) < 0.051, rtts  # the router and two Pythons add < 1 ms
    assert emu.stats()["late_us"]["p50"] < 500


def test_loss_and_duplicates_happen_at_their_rates(emu: Emulator, echo: None) -> None:
    result = ping(emu, Impairment(loss=0.2, duplicate=0.1), count=2000, interval=0.0005)
    stats = emu.stats()
    fwd = stats["forward"]
    assert fwd["packets"] == 2000
    assert 0.17 < fwd["lost"] / 2000 < 0.23
    assert 0.07 < fwd["duplicated"] / (2000 - fwd["lost"]) < 0.13
    # both directions lose 20 %: about 64 % of the probes come back
    assert 0.58 < result["received"] / 2000 < 0.70
    assert result["duplicates"] > 0.1 * result["received"]


def test_jitter_spreads_the_delay_and_reorders(emu: Emulator, echo: None) -> None:
    result = ping(emu, Impairment(delay=0.01, jitter=0.005), count=1000, interval=0.0005)
    rtts = result["rtt"]
    assert result["received"] == 1000
    assert min(rtts) >= 0.010
    # 10 + 10 ms +- 5 ms each way: at most 30 ms, plus what two Python peers
    # waiting for a core add to the slowest few (the tail is theirs, not the path's)
    assert sorted(rtts)[int(0.95 * len(rtts))] <= 0.031 + 0.003
    assert statistics.pstdev(rtts) > 0.002
    assert result["reordered"] > 50


def test_a_blackout_drops_everything_while_dark(emu: Emulator, echo: None) -> None:
    imp = Impairment(blackout_every=2.0, blackout_for=1.0, blackout_first=0.5)
    result = ping(emu, imp, count=300, interval=0.01)  # 3 s of probes: at least one dark second
    fwd = emu.stats()["forward"]
    assert fwd["lost"] == 0 and fwd["blackout_drops"] > 50
    assert (
        result["received"] + fwd["blackout_drops"] + emu.stats()["reverse"]["blackout_drops"] == 300
    )
    # the gap is one dark second: about 100 probes in a row, not scattered losses
    got = sorted(result["order"])
    gaps = [b - a - 1 for a, b in itertools.pairwise(got)]
    assert 85 <= max(gaps) <= 105, gaps


def test_the_mtu_is_enforced_and_the_kernel_learns_it(emu: Emulator, echo: None) -> None:
    emu.set(Impairment(mtu=1280))
    emu.reset()
    result = peer(emu, 0, "pmtu", "--to", f"{B}:9000", "--size", "1400")
    stats = emu.stats()["forward"]
    assert result["mtu_before"] == 1500
    assert result["mtu_after"] == 1280 and result["refused"] == 1
    assert stats["mtu_drops"] >= 1 and stats["icmp_sent"] >= 1
    assert stats["delivered"] == 0  # nothing over 1,280 bytes got through
    # a new path starts from scratch: the learned MTU is forgotten
    emu.set(Impairment())
    again = peer(emu, 0, "pmtu", "--to", f"{B}:9000", "--size", "1400", "--timeout", "0.3")
    assert again["mtu_before"] == 1500 and again["refused"] == 0


def test_the_bottleneck_limits_the_rate_and_bounds_its_queue(emu: Emulator) -> None:
    imp = Impairment(delay=0.01, rate=20e6, queue_bytes=64 * 1024)
    emu.set(imp)
    result = run_plain_tcp(emu, "cubic", 3_000_000, 1000, limit=60)
    assert result["ok"], result
    kbps = 3_000_000 / result["elapsed"] / 1000
    assert 1200 < kbps < 2500  # 20 Mbit/s = 2,500 KB/s of IP packets
    fwd = result["router"]["forward"]
    assert fwd["max_backlog"] <= 64 * 1024
    assert fwd["queue_drops"] > 0  # TCP fills any queue it is given
    # and they were all TCP's: the router counts whose packets it dropped
    tcp = fwd["protocols"]["tcp"]
    assert tcp["queue_drops"] == fwd["queue_drops"] and tcp["packets"] >= 3_000_000 // 1500


@pytest.mark.parametrize("transport", ["udp", "tcp"])
def test_purelink_through_a_bad_path_stores_every_record_exactly_once(
    emu: Emulator, transport: str
) -> None:
    imp = Impairment(
        delay=0.01, jitter=0.004, loss=0.02, duplicate=0.02, rate=20e6, queue_bytes=128 * 1024
    )
    emu.set(imp)
    records = fixed_records(2000, 1000)
    serve = Serve(emu, "batch")
    try:
        result = run_purelink(emu, serve, transport, "t", records, 60.0, [])
    finally:
        serve.stop()
    assert result["ok"], result.get("error")
    assert result["exactly_once"] and result["in_store"] == 2000
    fwd = result["router"]["forward"]
    assert fwd["lost"] > 0 and fwd["duplicated"] > 0  # the path really was bad


def test_nothing_is_left_behind_and_stale_namespaces_are_swept() -> None:
    def ours() -> list[str]:
        return [line.split()[0] for line in ip("netns", "list").splitlines() if "plk-" in line]

    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = f"plk-{gone.pid}-a"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    assert stale in sweep_stale()
    before = set(ours())
    with Emulator() as e:
        names = set(e.namespaces)
        assert names <= set(ours())
    assert not names & set(ours())
    assert set(ours()) <= before
    links = ip("link")
    assert e.devices[0] not in links and e.devices[1] not in links


def test_sigterm_stops_the_benchmark_and_tears_everything_down() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.paths",
            "--paths",
            "loss-5%",
            "--transports",
            "cubic",
            "--size",
            "50",
            "--quiet",
        ],
        cwd=CHECKOUT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    names = (f"plk-{proc.pid}-a", f"plk-{proc.pid}-b")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if ip("netns", "pids", names[0]).split():  # the sender runs in side A
            break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("the benchmark never started a sender")
    inside = [int(p) for ns in names for p in ip("netns", "pids", ns).split()]
    assert inside
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err
    listed = ip("netns", "list")
    assert names[0] not in listed and names[1] not in listed
    assert f"plk{proc.pid}a" not in ip("link")
    for pid in inside:  # the sender and receiver it started died with it
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
