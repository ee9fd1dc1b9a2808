"""The records a sender holds until the listener says they are stored.

Why it exists: the record queue is the sender's one promise to the
application (nothing pushed is forgotten before it is stored), and it is
simple enough to read on its own: records in with `push`, out with
`_release`.  `Sender` (sender.py) is built on it, so the send path reads
`_recs`, `_lens` and `_base` as its own attributes, with no call between.

Layout: `_recs[i]` has seq `_base + i`; `_recs[:_head]` are stored and
released lazily (cut when more than half the list is released, so a cut
copies at most as many references as it frees).  `_lens[i]` is
`len(_recs[i])` clamped to 65,535, in the very layout of a batch's length
table, so a batch's table is a slice of it (the link's queue() writes the
lengths as records arrive: no len() per record here).
"""

from __future__ import annotations

from array import array

from .. import native

__all__ = ["SenderRecords"]

_core = native.part("ring")  # records_bytes: _release's count in C


class SenderRecords:
    """Records pushed and not yet stored (a base of Sender)."""

    def __init__(self) -> None:
        # with the compiled core, not tracked by the garbage collector: it holds
        # exact bytes only (what queue() hands the ring), so no cycle runs
        # through it, and a young collection need not walk a backlog's records
        self._recs: list[bytes] = [] if _core is None else _core.untracked([])
        self._lens = array("H")
        self._head = 0
        self._base = 1
        self.stored = 0
        """Last seq the listener said is stored."""
        self.pushed = 0
        """Last seq handed in with push()."""
        self.stored_bytes = 0
        """Payload bytes of the records released as stored."""

    def push(self, records: list[bytes], lengths: array[int] | None = None) -> None:
        """Hand in records with seqs pushed+1, pushed+2, ... (the list is copied;
        `lengths`, their lengths as array("H") each clamped to 65,535, if known,
        may be kept as it is).  Exact bytes, as the link's queue() makes them: with
        the compiled core `_recs` is not tracked by the garbage collector, so a
        subclass instance in a reference cycle through it would never be freed.

        `_recs` stays one list object for the sender's life (extended and cut,
        never replaced): a long-lived list settles in the collector's oldest
        generation, where it is traversed only by the rare full collection; a
        fresh list of every backlog was young, and every young collection walked
        all its items (measured: ~10 % of the sending process's CPU)."""
        if not records:
            return
        if lengths is None:
            lengths = array("H", (min(len(r), 0xFFFF) for r in records))
        if not self._recs:
            self._head = 0
            self._base = self.stored + 1
            self._lens = lengths
        else:
            self._lens.extend(lengths)
        self._recs.extend(records)
        self.pushed += len(records)

    def push_taken(
        self, gens: tuple[tuple[int, list[bytes | None], int], ...], start: int, end: int
    ) -> int:
        """The compiled core's push from the link's ring (link/thread.py): the
        records of seqs start .. end (up to the first not written yet) go
        straight into `_recs`, with their length table, in one C call; returns
        how many.  Only where the compiled core has its ring (`_core`)."""
        assert _core is not None
        if not self._recs:
            self._head = 0
            self._base = self.stored + 1
            self._lens = array("H")
        table = _core.ring_take_into(gens, start, end, self._recs)
        self._lens.frombytes(table)
        n = len(table) // 2
        self.pushed += n
        return n

    @property
    def unstored(self) -> int:
        """Records pushed and not yet stored."""
        return self.pushed - self.stored

    def _restart_at(self, stored: int) -> None:
        """A fresh link starts where its producer left off: nothing held, the
        next record pushed gets seq `stored` + 1."""
        self.stored = self.pushed = stored
        self._base = stored + 1
        self._recs.clear()
        self._lens = array("H")
        self._head = 0

    def _release(self, stored: int) -> None:
        """Forget records up to `stored` (compacting the list now and then)."""
        if stored <= self.stored:
            return
        self.stored = stored
        head = stored - self._base + 1
        if _core is not None:  # the same count in C, from the length table
            self.stored_bytes += _core.records_bytes(self._recs, self._lens, self._head, head)
        else:
            lens = self._lens[self._head : head]
            self.stored_bytes += sum(lens)
            if 0xFFFF in lens:  # a clamped length: count the large records' real size
                big = self._recs[self._head : head]
                self.stored_bytes += sum(
                    len(r) - 0xFFFF for r, n in zip(big, lens, strict=True) if n == 0xFFFF
                )
        if head >= len(self._recs):
            self._recs.clear()
            self._lens = array("H")
            self._head = 0
            self._base = stored + 1
        elif head > 4096 and head * 2 > len(self._recs):
            del self._recs[:head]
            del self._lens[:head]
            self._base = stored + 1
            self._head = 0
        else:
            self._head = head
