"""A real `purelink serve` killed with SIGKILL: stored times are never late.

Why it exists: a group commit fdatasyncs the segment, and the times file
only once a SYNC_EVERY (docs/store.md, Stored times), so at a kill the newest
entries are in the page cache only -- a kill keeps them, a power cut may
not.  Both are run against the real process over tcp://: records told stored
in many group commits, the listener killed right after, the files read back
as the kill left them and after a restart recovered them, and then once more
with the times file cut back to its first entry, as a power cut may leave
it.  Every record told stored must be there once and read with a time no
earlier than the moment it was queued (so `since` at that moment finds it),
and no later than the restart.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path

import purelink
from helpers.serve_process import ServeProcess
from purelink.store import Store
from purelink.store.times import MTIME_SLACK, TIME_ENTRY

STREAM = "times"
ROUNDS = 30


def ship(serve: ServeProcess) -> dict[int, float]:
    """ROUNDS group commits of 4 records; the time (Unix seconds) each was queued."""
    queued: dict[int, float] = {}
    with purelink.connect(serve.url, stream=STREAM, producer="timed", timeout=20) as link:
        for r in range(ROUNDS):
            at = time.time()
            for i in range(4):
                queued[link.queue(b"round %d record %d" % (r, i))] = at
            assert link.wait_stored(timeout=20)
    return queued


def check(data: Path, queued: dict[int, float], latest: float) -> list[float]:
    """Every record told stored, once, each with a time from its queueing (ms
    floor) to `latest`, and `since` that time starts at or before it."""
    with Store(data) as store:
        timed = [(p, t, payload) for p, t, payload in store.read_timed(STREAM)]
        assert [p for p, _, _ in timed] == list(range(1, len(queued) + 1))
        times = []
        for (position, stored, _), seq in zip(timed, sorted(queued), strict=True):
            assert stored is not None
            at = int(queued[seq] * 1000) / 1000  # times are kept in whole milliseconds
            assert at <= stored <= latest, (position, stored)
            since = datetime.fromtimestamp(at, UTC)
            assert next(iter(store.read(STREAM, since=since)))[0] <= position
            times.append(stored)
        return times


def times_file(data: Path) -> Path:
    (path,) = (data / "streams" / STREAM).glob("*.times")
    return path


def test_a_kill_keeps_every_time_in_the_page_cache(tmp_path: Path) -> None:
    data = tmp_path / "data"
    serve = ServeProcess(data, transport="tcp").start()
    try:
        queued = ship(serve)
        entries = times_file(data).stat().st_size // TIME_ENTRY
        serve.kill()  # within SYNC_EVERY of the last times fdatasync, surely for some
        as_left = check(data, queued, time.time())
        assert entries >= ROUNDS // 2  # an entry for (almost) every group commit
        serve.start()
        serve.stop()
        recovered = check(data, queued, time.time())
        moved = [(a, b) for a, b in zip(recovered, as_left, strict=True) if a != b]
        # at most the batches after the last entry's first one, stored in its
        # millisecond, to the segment's last change plus MTIME_SLACK
        assert all(b < a <= max(as_left) + MTIME_SLACK + 0.005 for a, b in moved), moved
        assert recovered[: -len(moved) or None] == as_left[: -len(moved) or None]
    finally:
        serve.kill()


def test_times_a_power_cut_took_come_back_later_never_earlier(tmp_path: Path) -> None:
    data = tmp_path / "data"
    serve = ServeProcess(data, transport="tcp").start()
    try:
        queued = ship(serve)
        serve.kill()
        before = check(data, queued, time.time())
        os.truncate(times_file(data), TIME_ENTRY)  # only the first entry was durable
        serve.start()
        serve.stop()
        after = check(data, queued, time.time())
        assert after[0] == before[0]  # the first batch kept its entry
        assert all(a >= b for a, b in zip(after, before, strict=True))  # later, never earlier
        assert after[-1] > before[0]  # the batches after the first moved on
        assert len(set(after[1:])) <= 2  # the rest at the one time recovery stamped
    finally:
        serve.kill()
