"""Links the way the benchmarks need them: the "before" variants and a held backlog.

Why it exists: each of the four mechanisms (docs/design.md) is to be measured against the
naive way, kept in the benchmark.  The naive ways live here, outside the
product, built on the real `Link` so that they follow the lead's changes to
it:

* `WakeEveryRecordLink`: `queue` writes the eventfd for every record (the
  way before mechanism 1).  It calls the real `Link.queue` and then always
  signals, so it pays one extra Python call (~50 ns) besides the write;
* `no_gso(link)`: one `send` per datagram instead of UDP GSO (and no padding
  of a burst to equal segments, which only GSO needs);
* `held(link)`: a backlog.  While the link thread sleeps, the wakeup's
  `armed` flag is cleared -- "a write is on its way", so `queue` writes
  nothing -- and the write is made when the block ends: every record queued
  inside the block is taken by the link thread at once.  This uses the
  wakeup's own invariant (asleep and not armed implies a byte in the fd or on
  its way), so no wakeup is lost; it only delays one.

These reach into private attributes of `Link` (`_wakeup`, `_transport`,
`_sender`, `_taken`): a benchmark of internals may, the product's
tests may not.  `check_internals()` names what moved if the lead renames them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import purelink
from purelink.link.link import Link, launch

from ._common import wait_until

__all__ = ["VARIANTS", "WakeEveryRecordLink", "check_internals", "held", "no_gso", "open_link"]

VARIANTS: dict[str, str] = {
    "after": "the product as it is: wake only when asleep, once; UDP GSO",
    "wake-every-record": "before mechanism 1: queue() writes the eventfd for every record",
    "send-per-datagram": "before GSO: one send() per datagram",
}


class WakeEveryRecordLink(Link):
    """A link whose `queue` writes the eventfd for every record (the naive way)."""

    def queue(self, record: bytes, seq: int | None = None) -> int:
        s = Link.queue(self, record, seq)
        self._wakeup.signal()  # unconditionally: one eventfd write per record
        return s


def check_internals(link: Link) -> None:
    """Fail with a clear message if the private attributes used here moved."""
    for name in ("_wakeup", "_transport", "_sender", "_thread", "_taken"):
        if not hasattr(link, name):
            raise RuntimeError(f"purelink.Link has no {name} any more: update bench/_links.py")


def open_link(
    url: str,
    variant: str = "after",
    *,
    stream: str = "bench",
    on_stored: Callable[[int], Any] | None = None,
    **kwargs: Any,
) -> Link:
    """Connect a link of the given variant (see VARIANTS); returns after the handshake."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}")
    if variant == "wake-every-record":
        link: Link = WakeEveryRecordLink(url, stream, on_stored=on_stored, **kwargs)
        launch(link)
    else:
        link = purelink.connect(url, stream=stream, on_stored=on_stored, **kwargs)
    check_internals(link)
    if variant == "send-per-datagram":
        no_gso(link)
    return link


def no_gso(link: Link) -> None:
    """One send() per datagram from now on (the link falls back this way when the
    kernel refuses GSO; here it is forced)."""
    link._transport.gso = False


def asleep(link: Link, timeout: float = 5.0) -> bool:
    """Wait (bounded) until the link thread sleeps in epoll with nobody waking it."""
    w = link._wakeup
    return wait_until(lambda: w.armed and not w.pending, timeout)


@contextlib.contextmanager
def held(link: Link, timeout: float = 5.0) -> Iterator[int]:
    """Records queued inside the block are taken by the link thread only when it
    ends (see the module header).  Yields the link's `_taken` count at entry, so
    the caller can check nothing was taken early (`link._taken` unchanged)."""
    if not asleep(link, timeout):
        raise RuntimeError("the link thread did not go to sleep; cannot hold a backlog")
    w = link._wakeup
    w.armed = False  # "a write is on its way": queue() writes nothing ...
    try:
        yield link._taken
    finally:
        w.signal()  # ... and here it is
