"""The link's hand-off ring, which grows and shrinks with what is queued.

Why it exists: a ring sized for `capacity` up front costs 8 MB for the
default capacity of 1,000,000 (and the garbage collector's walk of it) on
every link, however little it queues.  This ring starts at RING_MIN slots
and is replaced by a bigger (or smaller) one as the backlog of records that
writers have queued and the link thread has not taken yet grows (or
shrinks), while queue() stays one store into a flat list, with no lock.

Theory of operation.  The link publishes `(slots, mask)` as ONE attribute;
queue() takes its seq, then loads that pair, then stores the record at
`slots[seq & mask]`.  Loading the pair in one go is what makes replacing it
safe: a writer uses a list and the mask made for that list, never an old list
with a new mask (which could index past its end).  The ring is a tuple of
generations `(since, slots, mask)`, oldest first: `since` is the first seq
granted after that list was published.  A new generation is made only when
the grant is exhausted (under the grant lock, see link.py), and published
before the next grant, so:

* a seq >= since of generation g is written into g's list or a newer one
  (its writer took it after g was published, and loads the pair after that);
* a seq below it may still be written into an older list: its writer took it
  earlier and may load the pair at any time later (a "straggler").

So the link thread looks for seq s in generation(s) -- the newest whose
`since <= s` -- and then in every newer one; in the common case there is one
generation and this is one slot.  No two records can meet in one slot: every
seq not yet taken by the link thread lies within `size` of the next one it
takes (the grant never reaches further: link.py `_grant`), so within one list
(of `size` slots) the live seqs' slots are distinct; a straggler writes an
older list only at its own slot there, and the link thread reads an older
list only for the seqs that generation covered.  The link thread clears a
slot when it takes its record, wherever it found it, and drops an old
generation once it has taken every seq below the next one's `since`; the
list is then garbage.

Sizes are powers of two between RING_MIN and the smallest power of two that
holds `capacity` (so Full is still decided by `capacity` alone): a grant
that finds the ring over half full makes it at least twice as big, and one
that finds it under 1/16 full shrinks it to four times the backlog (see
`size_for`).  Below the largest size every grant leaves at least half the ring
free, so the slow path that makes grants runs once per half a ring of records
at most.

With the compiled core, the link thread's take() and has() are
`_speedups.ring_take` and `ring_has` (src/speedups/ring.c), the same over
the same generations; the functions here are the reference.
"""

from __future__ import annotations

import itertools
from typing import Final

__all__ = ["RING_MIN", "Gen", "done", "has", "largest", "new_gen", "size_for", "take"]

RING_MIN: Final = 1024
"""Slots of a new link's ring (8 KB)."""

Slots = list[bytes | None]
Gen = tuple[int, Slots, int]
"""(since, slots, mask): the first seq granted after `slots` was published; the
list; len(slots) - 1."""


def largest(capacity: int) -> int:
    """The largest ring a link of `capacity` records ever needs."""
    return max(RING_MIN, 1 << (capacity - 1).bit_length())


def new_gen(since: int, size: int) -> Gen:
    """A generation of `size` (a power of two) empty slots, for seqs from `since` on."""
    return since, [None] * size, size - 1


def size_for(backlog: int, size: int, most: int) -> int:
    """The ring size a grant should use when `backlog` seqs are taken by writers
    and not yet by the link thread: `size` unless that is over half full (then
    grow to at least twice the backlog's need) or under 1/16 full (then shrink
    to four times the backlog), within RING_MIN .. `most`."""
    if 2 * backlog > size:
        return min(most, max(2 * size, 1 << (4 * backlog).bit_length()))
    if 16 * backlog < size and size > RING_MIN:
        return max(RING_MIN, 1 << (4 * backlog).bit_length())
    return size


def has(gens: tuple[Gen, ...], seq: int) -> bool:
    """Whether the record of `seq` is in the ring (where take() would find it)."""
    for since, slots, mask in reversed(gens):
        if slots[seq & mask] is not None:
            return True
        if since <= seq:
            return False
    return False


def take(gens: tuple[Gen, ...], start: int, end: int) -> list[bytes]:
    """Take the records of seqs start .. end (at most: it stops before the first
    seq whose record is not there yet) out of the ring, clearing their slots.
    `gens` must have been loaded after `end` was (see the module header)."""
    last = len(gens) - 1
    if last == 0:  # the common case: one list
        _, slots, mask = gens[0]
        chunk = _slice(slots, mask, start, end)
        if None in chunk:
            del chunk[chunk.index(None) :]
        _clear(slots, mask, start, start + len(chunk) - 1)
        return chunk  # type: ignore[return-value]  # no None left
    out: list[bytes | None] = []
    for g, (since, slots, mask) in enumerate(gens):
        lo = max(start, since)
        hi = end if g == last else min(end, gens[g + 1][0] - 1)
        if lo > hi:
            continue
        part = _slice(slots, mask, lo, hi)
        complete = True
        if None in part:
            for k in range(part.index(None), len(part)):
                if part[k] is None:  # a straggler wrote it into a newer list, or not yet
                    part[k] = _pop_newer(gens[g + 1 :], lo + k)
                    if part[k] is None:
                        del part[k:]
                        complete = False
                        break
        # cleared in an older list too: dropped with its records still in it,
        # that list's end would meet each of them again (cold, in a backlog)
        _clear(slots, mask, lo, lo + len(part) - 1)
        out += part
        if not complete:
            break
    return out  # type: ignore[return-value]  # no None left


def _pop_newer(newer: tuple[Gen, ...], seq: int) -> bytes | None:
    """The record of `seq` from the first of `newer` that holds it, taken out."""
    for _, slots, mask in newer:
        record = slots[seq & mask]
        if record is not None:
            slots[seq & mask] = None
            return record
    return None


def _slice(slots: Slots, mask: int, lo: int, hi: int) -> Slots:
    """A copy of the slots of seqs lo .. hi (wrapping)."""
    i, j = lo & mask, (hi & mask) + 1
    return slots[i:j] if i < j else slots[i:] + slots[:j]


def _clear(slots: Slots, mask: int, lo: int, hi: int) -> None:
    """Empty the slots of seqs lo .. hi (wrapping)."""
    if hi < lo:
        return
    i, j = lo & mask, (hi & mask) + 1
    if i < j:
        slots[i:j] = itertools.repeat(None, j - i)
    else:
        slots[i:] = itertools.repeat(None, len(slots) - i)
        slots[:j] = itertools.repeat(None, j)


def done(gens: tuple[Gen, ...], taken: int) -> int:
    """How many of the oldest generations hold no seq after `taken` (so can go)."""
    n = 0
    while n < len(gens) - 1 and gens[n + 1][0] - 1 <= taken:
        n += 1
    return n
