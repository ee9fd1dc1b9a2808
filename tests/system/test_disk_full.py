"""A real file system that fills up: `purelink serve` on a small tmpfs.

Why it exists: a full disk is a fault that heals (listener/storage.py).  The
listener must cut the stream back to its last whole batch, tell its links why
they wait, and go on by itself once there is room: no restart, nothing lost,
nothing stored twice.  A tmpfs with a ballast file is a disk that fills for
real (ENOSPC from write(2)); mounting one needs root, which these machines
and CI have.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

import purelink
from helpers.grace import wait_until
from helpers.serve_process import ServeProcess

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")

MiB = 1 << 20
PURELINK = [sys.executable, "-W", "error", "-m", "purelink"]


@contextlib.contextmanager
def small_disk(where: Path, size: int) -> Iterator[Path]:
    """A tmpfs of `size` bytes mounted at `where`, unmounted after."""
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:  # root without CAP_SYS_ADMIN (a container): nothing to test on
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def free(path: Path) -> int:
    fs = os.statvfs(path)
    return fs.f_bavail * fs.f_frsize


def ballast(path: Path, leave: int) -> None:
    """Fill the file system of `path` until `leave` bytes are free."""
    with open(path, "wb") as f:
        f.write(b"\0" * max(free(path.parent) - leave, 0))


def test_a_full_disk_holds_the_link_and_the_stream_goes_on_once_there_is_room(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path / "disk", 24 * MiB) as disk:
        ballast(disk / "ballast", 3 * MiB)
        records = [b"%07d:" % i + b"r" * 993 for i in range(8_000)]  # 8 MB, 1 KB each
        with ServeProcess(disk / "data", extra=["--min-free", "0"]) as srv:
            link = purelink.connect(srv.url, stream="full", producer="p", timeout=10)
            for r in records:
                link.queue(r)
            wait_until(lambda: link.stats().waiting == "disk_full", timeout=60)
            held_at = link.stored
            assert held_at < len(records)
            assert link.stats().disk_full >= 1
            (disk / "ballast").unlink()  # the operator makes room
            assert link.wait_stored(timeout=60), link.stats()
            assert link.stats().waiting == ""
            link.close()
            assert srv.stop() == 0
        assert "no room on the disk" in srv.stderr and "has room again" in srv.stderr
        assert "Traceback" not in srv.stderr
        store = purelink.Store(disk / "data")
        got = list(store.read("full"))
        assert [p for _, p in got] == records  # exactly once, in order
        assert [pos for pos, _ in got] == list(range(1, len(records) + 1))


def test_below_min_free_the_stream_stops_with_room_left_and_goes_on_above_it(
    tmp_path: Path,
) -> None:
    with small_disk(tmp_path / "disk", 24 * MiB) as disk:
        ballast(disk / "ballast", 8 * MiB)
        records = [b"%07d:" % i + b"m" * 993 for i in range(6_000)]  # 6 MB
        with ServeProcess(disk / "data", extra=["--min-free", str(5 * MiB)]) as srv:
            link = purelink.connect(srv.url, stream="low", timeout=10)
            for r in records:
                link.queue(r)
            wait_until(lambda: link.stats().waiting == "disk_full", timeout=60)
            assert free(disk) > 4 * MiB  # stopped near the mark, not at a full disk
            stalled = link.stored
            time.sleep(0.5)  # a while below the mark: nothing more is stored (asserted)
            assert link.stored == stalled
            (disk / "ballast").unlink()
            assert link.wait_stored(timeout=60), link.stats()
            link.close()
            srv.stop()
        assert "below the min-free mark" in srv.stderr
        assert [p for _, p in purelink.Store(disk / "data").read("low")] == records


def line_within(pipe: IO[bytes], timeout: float) -> bytes:
    """The next line of a child's pipe, or fail after `timeout` seconds."""
    ready, _, _ = select.select([pipe], [], [], timeout)
    assert ready, f"no line within {timeout} s"
    return pipe.readline()


def test_tail_says_when_its_stream_is_held_and_when_it_goes_on(tmp_path: Path) -> None:
    """`purelink tail --follow` hears of the hold from the listener (a NOTICE),
    says so on stderr, and prints every record once the stream goes on."""
    with small_disk(tmp_path / "disk", 24 * MiB) as disk:
        ballast(disk / "ballast", 3 * MiB)
        records = [b"%07d:" % i + b"t" * 993 for i in range(6_000)]  # 6 MB
        with ServeProcess(disk / "data", extra=["--min-free", "0"], transport="tcp") as srv:
            tail = subprocess.Popen(
                [*PURELINK, "tail", srv.url, "--stream", "held", "--follow"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            assert tail.stdout is not None and tail.stderr is not None
            out: list[bytes] = []  # read on a thread: a full pipe would stop the tail
            reading = threading.Thread(target=lambda: out.extend(tail.stdout or ()))
            reading.start()
            try:
                link = purelink.connect(srv.url, stream="held", timeout=10)
                link.queue(records[0])
                wait_until(lambda: len(out) == 1, timeout=30)  # it follows
                for r in records[1:]:
                    link.queue(r)
                wait_until(lambda: link.stats().waiting == "disk_full", timeout=60)
                held = line_within(tail.stderr, 30).decode()
                (disk / "ballast").unlink()
                going = line_within(tail.stderr, 60).decode()
                assert link.wait_stored(timeout=60), link.stats()
                link.close()
                wait_until(lambda: len(out) == len(records), timeout=30)
            finally:
                tail.send_signal(signal.SIGINT)
                tail.wait(timeout=20)
                reading.join(timeout=20)
                err = tail.stderr.read()
                tail.stdout.close()
                tail.stderr.close()
            srv.stop()
        assert held.startswith(
            "purelink tail: stream held stores nothing for now: the listener has no room on "
            "its disk"
        )
        assert going == "purelink tail: stream held is storing again\n"
        assert out == [r + b"\n" for r in records]
        assert "Traceback" not in err.decode()
