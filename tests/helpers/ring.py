"""A stand-in for the Sender that keeps what a link thread pushes, for the
ring's tests (tests/link/test_ring.py, tests/native/test_ring.py): it takes
the pure path's push and the compiled core's push_taken alike; and a link
made, not connected, with one for its sender (`make`, `free`)."""

from __future__ import annotations

from array import array

from purelink import native
from purelink.link import ring
from purelink.link.link import Link


class Collector:
    """Stands in for the Sender: keeps what the link thread pushes."""

    def __init__(self) -> None:
        self.records: list[bytes] = []

    def push(self, records: list[bytes], lengths: array[int] | None = None) -> None:
        # the length table says 0xFFFF for a record of 64 KiB or more
        assert lengths is not None and list(lengths) == [min(len(r), 0xFFFF) for r in records]
        self.records.extend(records)

    def push_taken(self, gens: tuple[ring.Gen, ...], start: int, end: int) -> int:
        """The compiled core's push (the link thread calls it where the core has
        its ring): the same take, through push."""
        part = native.part("ring")
        assert part is not None
        records: list[bytes] = []
        table = part.ring_take_into(gens, start, end, records)  # type: ignore[attr-defined]
        self.push(records, array("H", table))
        return len(records)


def make(cls: type[Link] = Link, capacity: int = 1 << 15, capacity_bytes: int = 256 << 20) -> Link:
    """A link made, not connected (no thread), whose sender is a Collector."""
    link = cls("udp://127.0.0.1:9", "s", capacity=capacity, capacity_bytes=capacity_bytes)
    link._sender = Collector()  # type: ignore[assignment]
    return link


def free(link: Link) -> None:
    """Close what `make`'s link opened (its socket and its wakeup)."""
    link._transport.close()
    link._wakeup.close()
