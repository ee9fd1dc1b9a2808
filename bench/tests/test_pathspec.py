"""`purelink bench paths --path SPEC`: a path written on the command line
(bench/paths/spec.py) becomes the emulator's impairment, and a mistake is
refused with what is wrong."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's bench/

from bench.paths.spec import BASE, PATHS, parse_path


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
