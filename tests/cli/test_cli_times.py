"""`--since`/`--until` on `read` and `tail`, and `streams`' last stored time,
through the real command.

The data directory is filled first by a DataDir with a set clock (batches
stored at known times, many small segments); the commands then read it, and
`tail` reads it through a `purelink serve` that recovered it.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.helpers.cli import assert_one_line_error, run
from tests.helpers.serve_process import ServeProcess

from purelink import subscribe
from purelink.protocol.wire import encode_batch, verify_batch
from purelink.store import DataDir

HOUR = 3600.0
BATCHES = 48  # one batch of 2 records every 5 minutes, from 4 hours ago


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """A directory whose batch i (records b"r<2i>", b"r<2i+1>") was stored at
    t0 + 300 i, t0 = 4 hours ago on a whole second."""
    path = tmp_path_factory.mktemp("times") / "data"
    t0 = float(int(time.time() - 4 * HOUR))
    now = [t0]
    with DataDir(path, segment_bytes=150, clock=lambda: now[0]) as directory:
        log = directory.stream("s")
        for i in range(BATCHES):
            now[0] = t0 + 300 * i
            raw = encode_batch(1, 1, 2 * i + 1, [b"r%d" % (2 * i), b"r%d" % (2 * i + 1)])
            log.append([(raw, verify_batch(raw))])
        log.sync()
    assert len(list((path / "streams" / "s").glob("*.seg"))) > 10
    return path, t0


def lines_of(first_batch: int, end_batch: int) -> bytes:
    return b"".join(b"r%d\n" % r for r in range(2 * first_batch, 2 * end_batch))


def test_read_since_an_iso_time_without_a_zone_is_utc(data: tuple[Path, float]) -> None:
    path, t0 = data
    out = run("read", "--data", str(path), "--stream", "s", "--since", iso(t0 + 300 * 40))
    assert (out.returncode, out.stdout) == (0, lines_of(40, BATCHES))
    zoned = datetime.fromtimestamp(t0 + 300 * 40, UTC).astimezone().isoformat()  # local zone
    out = run("read", "--data", str(path), "--stream", "s", "--since", zoned)
    assert (out.returncode, out.stdout) == (0, lines_of(40, BATCHES))


def test_read_since_and_until_durations(data: tuple[Path, float]) -> None:
    path, t0 = data
    # batches stored 2h..1h ago: t0 + 300 i in [now - 2h, now - 1h); the test takes
    # well under the 5 minutes between two batches, so the edges are sure
    ago = time.time() - t0
    first = int(-(-(ago - 2 * HOUR) // 300))
    end = int(-(-(ago - HOUR) // 300))
    out = run("read", "--data", str(path), "--stream", "s", "--since", "2h", "--until", "60m")
    assert (out.returncode, out.stdout) == (0, lines_of(first, end))
    out = run("read", "--data", str(path), "--stream", "s", "--since", "1d", "--to", "4")
    assert (out.returncode, out.stdout) == (0, b"r0\nr1\nr2\nr3\n")
    out = run("read", "--data", str(path), "--stream", "s", "--since", "90s")
    assert (out.returncode, out.stdout) == (0, b"")  # nothing stored that recently


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--since", "yesterday"], "bad time 'yesterday'"),
        (["--since", "5x"], "bad time '5x'"),
        (["--until", "2024-13-01"], "bad time '2024-13-01'"),
        (["--since", "1h", "--from", "3"], "give --from or --since, not both"),
        (["--until", "1h", "--to", "3"], "give --to or --until, not both"),
        (["--since", "1h", "--until", "2h"], "--until is before --since"),
    ],
)
def test_bad_times_are_one_line_errors(
    data: tuple[Path, float], args: list[str], message: str
) -> None:
    out = run("read", "--data", str(data[0]), "--stream", "s", *args)
    assert message in assert_one_line_error(out, 2)


def test_since_on_a_store_without_times_fails_clearly(tmp_path: Path) -> None:
    with DataDir(tmp_path) as directory:
        raw = encode_batch(1, 1, 1, [b"old"])
        directory.stream("s").append([(raw, verify_batch(raw))])
        directory.stream("s").sync()
    for path in (tmp_path / "streams" / "s").glob("*.times"):
        path.unlink()  # as a purelink that kept no times left it
    out = run("read", "--data", str(tmp_path), "--stream", "s", "--since", "1h")
    assert out.returncode == 1
    assert out.stderr.decode().startswith(
        "purelink read: error: stream 's': records before position"
    )
    assert "stored without a time" in out.stderr.decode()
    assert run("read", "--data", str(tmp_path), "--stream", "s").stdout == b"old\n"


def test_streams_shows_the_last_stored_time(data: tuple[Path, float]) -> None:
    path, t0 = data
    out = run("streams", "--data", str(path))
    assert out.returncode == 0, out.stderr
    header, row = out.stdout.decode().splitlines()
    assert header.split() == ["stream", "first", "last", "records", "bytes", "last", "stored"]
    assert row.split()[:4] == ["s", "1", str(2 * BATCHES), str(2 * BATCHES)]
    assert row.split()[-1] == iso(t0 + 300 * (BATCHES - 1)) + ".000Z"


def test_tail_and_subscribe_since_seek_in_the_listener(
    data: tuple[Path, float], tmp_path: Path
) -> None:
    path, t0 = data
    copy = tmp_path / "data"
    copy.mkdir()
    for stream in (path / "streams").iterdir():
        (copy / "streams" / stream.name).mkdir(parents=True)
        for f in stream.iterdir():
            (copy / "streams" / stream.name / f.name).write_bytes(f.read_bytes())
    with ServeProcess(copy, transport="tcp") as server:
        out = run("tail", server.url, "--stream", "s", "--since", iso(t0 + 300 * 45 - 1))
        assert (out.returncode, out.stdout) == (0, lines_of(45, BATCHES))
        out = run("tail", server.url, "--stream", "s", "--since", "1m", "--format", "json")
        assert (out.returncode, out.stdout) == (0, b"")  # nothing that recent
        since = datetime.fromtimestamp(t0 + 300 * 46, UTC)
        with subscribe(server.url, "s", follow=False, since=since) as records:
            assert [p for p, _ in records] == [93, 94, 95, 96]
        with subscribe(server.url, "s", follow=False, since=HOUR * 24) as records:
            got = list(records)
        assert [json.dumps(r.decode()) for _, r in got][:1] == ['"r0"']
        assert len(got) == 2 * BATCHES
        with pytest.raises(ValueError, match="start or since"):
            subscribe(server.url, "s", start=5, since=since)
