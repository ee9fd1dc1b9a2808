"""`purelink bench paths --path SPEC`: a path written on the command line
(bench/paths/spec.py) becomes the emulator's impairment, and a mistake is
refused with what is wrong; `--shared`'s paths and its arithmetic (shared.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's bench/

from bench.paths.shared import SHARED_PATHS, buffer_label, delivered_at, path_label
from bench.paths.spec import BASE, PATHS, bdp_bytes, parse_path


def test_a_spec_sets_each_field_over_the_base() -> None:
    name, imp = parse_path(
        "rate=20mbit,rtt=100ms,loss=0.5%,jitter=3ms,queue=128k,mtu=1400,dup=1%", BASE
    )
    assert name == "rate=20mbit,rtt=100ms,loss=0.5%,jitter=3ms,queue=128k,mtu=1400,dup=1%"
    assert imp.rate == 20e6 and imp.delay == pytest.approx(0.05)
    assert imp.loss == pytest.approx(0.005) and imp.jitter == pytest.approx(0.003)
    assert imp.queue_bytes == 128 * 1024 and imp.mtu == 1400
    assert imp.duplicate == pytest.approx(0.01)


def test_an_empty_spec_is_the_clean_path_and_name_names_it() -> None:
    assert parse_path("name=base", BASE) == ("base", PATHS["clean"])
    _, imp = parse_path("blackout=6s/1.5s,delay=10ms,rate=0", BASE)
    assert (imp.blackout_every, imp.blackout_for, imp.blackout_first) == (6.0, 1.5, 1.0)
    assert imp.delay == pytest.approx(0.01) and imp.rate == 0


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("rate=fast", "rate='fast'"),
        ("rtt=5parsecs", "rtt="),
        ("speed=1", "unknown key 'speed'"),
        ("loss", "KEY=VALUE"),
        ("loss=150%", "probability"),
        ("blackout=1s/2s", "below blackout_every"),
    ],
)
def test_a_bad_spec_says_what_is_wrong(spec: str, says: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_path(spec, BASE)
    assert says in str(info.value)


def test_a_queue_in_bdps_is_of_the_paths_rate_and_round_trip() -> None:
    _, imp = parse_path("queue=2.5bdp,rate=20mbit,rtt=40ms", BASE)  # order does not matter
    assert bdp_bytes(imp) == 100_000 and imp.queue_bytes == 250_000
    _, same = parse_path("rate=20mbit,rtt=40ms,buffer=250000", BASE)
    assert same == imp
    with pytest.raises(ValueError, match="needs a rate"):
        parse_path("rate=0,queue=1bdp", BASE)


def test_the_shared_paths_are_the_depths_asked_for() -> None:
    depths = {name: imp.queue_bytes / bdp_bytes(imp) for name, imp in SHARED_PATHS.items()}
    assert depths == {
        "20mbit-40ms-0.5bdp": 0.5,
        "20mbit-40ms-1bdp": 1,
        "20mbit-40ms-2.5bdp": 2.5,
        "20mbit-40ms-10bdp": 10,
        "50mbit-100ms-0.4bdp": 0.4,
        "50mbit-100ms-2bdp": 2,
        "50mbit-10ms-2bdp": 2,
    }
    assert buffer_label(SHARED_PATHS["50mbit-100ms-0.4bdp"]) == "250,000 B (0.4 BDP)"
    assert path_label(SHARED_PATHS["50mbit-10ms-2bdp"]) == "50 Mbit/s, 10 ms"


def test_what_a_flow_delivered_is_interpolated_between_its_time_stamps() -> None:
    samples = [(10.0, 0), (11.0, 1000), (13.0, 5000)]
    assert delivered_at(samples, 9.0) == 0
    assert delivered_at(samples, 10.5) == 500
    assert delivered_at(samples, 12.5) == 4000
    assert delivered_at(samples, 20.0) == 5000
    assert delivered_at([], 1.0) == 0
