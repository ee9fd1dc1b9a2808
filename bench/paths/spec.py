"""A path of `purelink bench paths --path SPEC`, written on the command line.

Why it exists: the named matrix (PATHS below) is one bottleneck and one
RTT; a transport tuned to it could lose elsewhere.  A spec describes any
other path the emulator can make, as comma-separated KEY=VALUE items over
the matrix's base (50 Mbit/s, 50 ms RTT, 256 KB queue, nothing else):

    rate=20mbit   bottleneck, bit/s of IP packets (suffix kbit, mbit, gbit; 0: none)
    rtt=100ms     round trip: half of it each way (or delay=, one way; suffix ms, us, s)
    loss=0.5%     independent loss per packet (or a fraction: 0.005)
    jitter=3ms    each packet's delay +- up to this (reorders)
    queue=128k    drop-tail queue, bytes (suffix k = KiB, m = MiB), or in
                  bandwidth-delay products of the path's rate and RTT: queue=2.5bdp
                  (buffer= is the same key)
    mtu=1400      largest IP packet
    dup=1%        duplicates
    blackout=6s/1.5s  dark for 1.5 s every 6 s (the first 1 s into the run)
    name=wan      what the table calls it (default: the spec itself)

Both directions get the same, as on the named paths.

The named paths themselves (BASE, PATHS, TORTURE) are here too: a spec is
read over BASE, and the self-test drives BASE as the matrix does.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from .model import Impairment

__all__ = ["BASE", "PATHS", "TORTURE", "bdp_bytes", "parse_path"]

BASE = Impairment(delay=0.025, rate=50e6, queue_bytes=256 * 1024)
"""Every named path: a 50 Mbit/s bottleneck, a 256 KB queue, 25 ms each way."""
PATHS: dict[str, Impairment] = {
    "clean": BASE,
    "loss-0.1%": replace(BASE, loss=0.001),
    "loss-1%": replace(BASE, loss=0.01),
    "loss-5%": replace(BASE, loss=0.05),
    "jitter-2ms": replace(BASE, jitter=0.002),
    "jitter-10ms": replace(BASE, jitter=0.010),
    "blackouts": replace(BASE, blackout_every=6.0, blackout_for=1.5, blackout_first=1.0),
    "mtu-1280": replace(BASE, mtu=1280),
    "mtu-1420": replace(BASE, mtu=1420),
}
"""Each path by name: what each direction does (model.py)."""
TORTURE = replace(
    BASE,
    loss=0.10,
    duplicate=0.05,
    jitter=0.020,
    blackout_every=6.0,
    blackout_for=1.5,
    blackout_first=1.0,
)
"""The torture run's path: 10 % loss, 5 % duplicates, 20 ms jitter, blackouts."""

_NUMBER = re.compile(r"^([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)\s*([a-z%]*)$")
_TIME = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}
_RATE = {"": 1.0, "bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
_SIZE = {"": 1, "b": 1, "k": 1024, "kb": 1024, "m": 1 << 20, "mb": 1 << 20}
_SHARE = {"": 1.0, "%": 0.01}


def _value(key: str, text: str, units: dict[str, Any]) -> float:
    m = _NUMBER.match(text.strip().lower())
    if m is None or m.group(2) not in units:
        raise ValueError(f"{key}={text!r}: a number with one of {', '.join(u for u in units if u)}")
    return float(m.group(1)) * units[m.group(2)]


_FIELDS: dict[str, tuple[str, dict[str, Any], type]] = {
    "rate": ("rate", _RATE, float),
    "delay": ("delay", _TIME, float),
    "jitter": ("jitter", _TIME, float),
    "loss": ("loss", _SHARE, float),
    "dup": ("duplicate", _SHARE, float),
    "duplicate": ("duplicate", _SHARE, float),
    "mtu": ("mtu", {"": 1}, int),
}
"""Keys that set one field of the impairment from one number: (field, units, type)."""


def bdp_bytes(imp: Impairment) -> int:
    """The path's bandwidth-delay product: its rate times its round trip, bytes."""
    return round(imp.rate / 8 * 2 * imp.delay)


def _queue(text: str, imp: Impairment) -> int:
    """queue=128k (bytes) or queue=2.5bdp (of the path's rate and round trip)."""
    if not text.strip().lower().endswith("bdp"):
        return int(_value("queue", text, _SIZE))
    if not bdp_bytes(imp):
        raise ValueError(f"queue={text!r}: in BDPs it needs a rate and a round trip")
    return round(_value("queue", text.strip()[:-3], {"": 1.0}) * bdp_bytes(imp))


def parse_path(spec: str, base: Impairment) -> tuple[str, Impairment]:
    """(name, impairment) of `spec` over `base`; ValueError saying what is wrong."""
    imp = base
    name = spec
    queue = None  # read last: in BDPs it depends on the rate and round trip
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        key, sep, text = item.partition("=")
        key = key.strip().lower()
        if not sep:
            raise ValueError(f"{item!r}: expected KEY=VALUE")
        if key in _FIELDS:
            field, units, kind = _FIELDS[key]
            imp = replace(imp, **{field: kind(_value(key, text, units))})
        elif key == "name":
            name = text.strip()
        elif key == "rtt":
            imp = replace(imp, delay=_value(key, text, _TIME) / 2)
        elif key in ("queue", "buffer"):
            queue = text
        elif key == "blackout":
            every, _, length = text.partition("/")
            imp = replace(
                imp,
                blackout_every=_value(key, every, _TIME),
                blackout_for=_value(key, length or "0", _TIME),
                blackout_first=1.0,
            )
        else:
            raise ValueError(f"unknown key {key!r} in {spec!r}")
    if queue is not None:
        imp = replace(imp, queue_bytes=_queue(queue, imp))
    if not name.strip():
        raise ValueError("name=: the path needs a name")
    return name, imp
