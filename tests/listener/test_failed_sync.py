"""A failed fsync, injected at the storage port of a live listener on real files.

Why it exists: after a failed fsync the kernel may have dropped the dirty
pages (fsyncgate), so the stream is stopped: nothing written since the last
good sync is told stored, its links wait and are told why, other streams go
on, and a restart recovers the stream from its files -- exactly once.  These
machines have no faulty disk, so the fault is injected: os.fdatasync fails
with EIO for the segment files of one stream.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from pathlib import Path

import pytest

import purelink
from helpers.grace import wait_until
from purelink.testing.ports import free_port


def test_a_failed_sync_stops_its_stream_until_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = os.fdatasync
    broken = {"on": False}

    def fdatasync(fd: int) -> None:
        # Linux reports a writeback error to one fsync, and the next one succeeds
        # while the pages it dropped are gone (fsyncgate): fail once
        if broken["on"] and "/bad/" in os.readlink(f"/proc/self/fd/{fd}"):
            broken["on"] = False
            raise OSError(errno.EIO, "Input/output error (injected)")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    port = free_port(socket.SOCK_DGRAM)
    url = f"udp://127.0.0.1:{port}"
    bad_records = [b"bad %d" % i for i in range(2000)]
    good_records = [b"good %d" % i for i in range(2000)]
    caplog.set_level(logging.WARNING)
    lst = purelink.Listener(tmp_path / "d", udp=f"127.0.0.1:{port}")
    lst.start()
    try:
        bad = purelink.connect(url, stream="bad", producer="b")
        good = purelink.connect(url, stream="good")
        for r in bad_records[:1000]:
            bad.queue(r)
        assert bad.wait_stored(timeout=30)
        broken["on"] = True
        for r in bad_records[1000:]:
            bad.queue(r)
        for r in good_records:
            good.queue(r)
        wait_until(lambda: bad.stats().waiting == "stream_failed", timeout=30)
        assert good.wait_stored(timeout=30)  # the other stream goes on
        told = bad.stored
        assert told < len(bad_records)
        assert lst.stats().dropped.get("stream_failed", 0) >= 1
        said = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert any(
            "stream bad is stopped" in m and "fdatasync of" in m and "Errno 5" in m for m in said
        ), said
        good.close()
    finally:
        lst.close()
    # the unsynced tail was cut off the file: only what was made durable is left
    # (the page cache would have served the rest to a restart as if stored)
    kept = [p for _, p in purelink.Store(tmp_path / "d").read("bad")]
    assert len(kept) >= told and kept == bad_records[: len(kept)]
    assert len(kept) < len(bad_records)
    assert any("cut back to position" in m for m in said)
    with purelink.Listener(tmp_path / "d", udp=f"127.0.0.1:{port}"):
        assert bad.wait_stored(timeout=60), bad.stats()
        assert bad.stats().waiting == ""
        bad.close()
        store = purelink.Store(tmp_path / "d")
        assert [p for _, p in store.read("bad")] == bad_records
        assert [p for _, p in store.read("good")] == good_records
