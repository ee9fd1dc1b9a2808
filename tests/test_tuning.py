"""The opt-in GIL switch-interval remedy changes the setting only when asked."""

from __future__ import annotations

import sys

import pytest

import purelink.tuning


def test_set_switch_interval_returns_the_old_value_and_sets_the_new() -> None:
    before = sys.getswitchinterval()
    try:
        old = purelink.tuning.set_switch_interval(0.001)
        assert old == before
        assert sys.getswitchinterval() == pytest.approx(0.001)
    finally:
        sys.setswitchinterval(before)


def test_importing_purelink_does_not_touch_the_interval() -> None:
    assert sys.getswitchinterval() == pytest.approx(0.005)


@pytest.mark.parametrize("bad", [0, -1, 2])
def test_bad_interval(bad: float) -> None:
    with pytest.raises(ValueError):
        purelink.tuning.set_switch_interval(bad)
