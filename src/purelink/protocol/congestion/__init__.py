"""Congestion controllers: the policy of how much a link has in flight and how
fast it sends (base.py says what the sender tells them and reads back).

`create(name, ...)` makes one by name: "bbr" (the default of UDP links: BBR
that judges what shares the path and competes with TCP flows by it; bbr.py,
crosstraffic.py), "bbr-cooperative" (the same BBR without the judgement, for
a path that only purelink links share), "cubic" (RFC 9438, paced) or
"newreno" (TCP links, and the before variant of the benchmarks).
"bbr-shared", the judging BBR's name while it was not the default, still
makes it."""

from __future__ import annotations

from .base import CongestionControl, CongestionStatistics, RateSample
from .bbr import Bbr
from .cubic import Cubic
from .newreno import NewReno
from .rate import DeliveryRate

__all__ = [
    "NAMES",
    "Bbr",
    "CongestionControl",
    "CongestionStatistics",
    "Cubic",
    "DeliveryRate",
    "NewReno",
    "RateSample",
    "create",
]

NAMES = ("bbr", "bbr-cooperative", "cubic", "newreno")
"""The controllers `create` knows."""


def create(name: str, datagram_size: int, seed: int = 0) -> CongestionControl:
    """A controller by name; ValueError for an unknown one."""
    if name in ("bbr", "bbr-shared"):
        return Bbr(datagram_size, seed=seed)
    if name == "bbr-cooperative":
        return Bbr(datagram_size, seed=seed, shared=False)
    if name == "cubic":
        return Cubic(datagram_size)
    if name == "newreno":
        return NewReno(datagram_size)
    raise ValueError(f"congestion must be one of {', '.join(NAMES)}, not {name!r}")
