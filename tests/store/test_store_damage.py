"""Random damage to the active segment, seeded: recovery keeps exactly the
whole batches before the first damaged byte, serves nothing else, logs the cut.

Why it exists: test_store_recovery.py damages one small stream at every byte
of its last batch; this file damages bigger, multi-segment streams the ways a
disk and a power cut do (a cut at any offset, bits flipped in the last
batches, a zero-filled tail, a zero-filled page with good batches after it,
garbage appended) and checks one rule for all of them against the undamaged
original: the kept records are those of the batches that end before the first
byte that differs, a reader never yields a record of a damaged batch, and the
writer opens, says what it cut (at ERROR when good batches after the damage
were discarded) and goes on appending.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers.shipping import report
from purelink.errors import Error
from purelink.protocol.wire import encode_batch, encode_large_batch, verify_batch
from purelink.store import DataDir, Store
from purelink.store.format import ScanState, scan_batches

LOGGER = "purelink.store"
KINDS = ("cut", "flip", "zero_tail", "zero_page", "garbage_tail")


@pytest.fixture(autouse=True)
def no_disk_flushes(monkeypatch: pytest.MonkeyPatch) -> None:
    """What is on disk after a crash is modelled by the damage itself; the
    flushes only cost time here (about 0.2 s a seed), so they are skipped."""
    monkeypatch.setattr("os.fdatasync", lambda fd: None)
    monkeypatch.setattr("os.fsync", lambda fd: None)


@dataclass
class Built:
    records: list[bytes]
    """Every record of the stream, position p at index p - 1."""
    active: Path
    """The last segment."""
    before: int
    """Records in the closed segments."""
    batches: list[tuple[int, int, int]]
    """(offset, length, count) of each batch of the active segment."""


def build(path: Path, rng: random.Random) -> Built:
    """A stream of 2 producers and 20-60 batches over several segments."""
    seqs = {7: 1, (1 << 63) | 9: 1}
    records: list[bytes] = []
    with DataDir(path, segment_bytes=rng.choice((2048, 4096, 1 << 20))) as data:
        log = data.stream("s")
        for _ in range(rng.randrange(20, 60)):
            producer = rng.choice(list(seqs))
            seq = seqs[producer]
            if rng.random() < 0.1:
                recs = [rng.randbytes(rng.randrange(2000, 6000))]
                raw = encode_large_batch(producer, 1, seq, recs[0])
            else:
                recs = [rng.randbytes(rng.randrange(0, 300)) for _ in range(rng.randrange(1, 20))]
                raw = encode_batch(producer, 1, seq, recs)
            seqs[producer] += len(recs)
            log.append([(raw, verify_batch(raw))])
            records += recs
        log.sync()
    active = max((path / "streams" / "s").glob("*.seg"))
    base = int(active.name.removesuffix(".seg"))
    batches = []
    with active.open("rb") as f:
        state = ScanState(0, base)
        for offset, batch, header in scan_batches(f.fileno(), state, active.stat().st_size):
            batches.append((offset, len(batch), header.count))
    assert state.problem is None
    return Built(records, active, base - 1, batches)


def damage(original: bytes, built: Built, kind: str, rng: random.Random) -> bytes:
    size = len(original)
    if kind == "cut":
        return original[: rng.randrange(0, size + 1)]
    if kind == "flip":  # somewhere in the last few batches
        start = built.batches[max(0, len(built.batches) - 5)][0]
        out = bytearray(original)
        for _ in range(rng.randrange(1, 9)):
            out[rng.randrange(start, size)] ^= 1 << rng.randrange(8)
        return bytes(out)
    if kind == "zero_tail":  # the last pages never reached the disk
        at = rng.randrange(max(0, size - 8192), size)
        return original[:at] + bytes(size - at)
    if kind == "zero_page":  # one page lost, later ones written: good batches follow
        page = rng.randrange(0, max(1, size // 4096)) * 4096
        end = min(page + 4096, size)
        return original[:page] + bytes(end - page) + original[end:]
    assert kind == "garbage_tail"
    return original + rng.choice((bytes(rng.randrange(1, 5000)), rng.randbytes(200)))


def first_difference(original: bytes, damaged: bytes) -> int:
    for i, (a, b) in enumerate(zip(original, damaged, strict=False)):
        if a != b:
            return i
    return min(len(original), len(damaged))


def run_seed(tmp_path: Path, seed: int, caplog: pytest.LogCaptureFixture) -> dict[str, int]:
    rng = random.Random(seed)
    built = build(tmp_path, rng)
    original = built.active.read_bytes()
    kind = KINDS[seed % len(KINDS)]
    damaged = damage(original, built, kind, rng)
    built.active.write_bytes(damaged)
    first_bad = first_difference(original, damaged)
    whole = [b for b in built.batches if b[0] + b[1] <= first_bad]
    kept = built.before + sum(count for _, _, count in whole)
    cut_at = whole[-1][0] + whole[-1][1] if whole else 0
    hit = next((b for b in built.batches if b[0] + b[1] > first_bad), None)
    good_after = [b for b in built.batches if hit and b[0] > hit[0] and b[0] + b[1] <= len(damaged)]
    good_after = [
        b for b in good_after if damaged[b[0] : b[0] + b[1]] == original[b[0] : b[0] + b[1]]
    ]
    expected = list(enumerate(built.records[:kept], start=1))

    # the reader: every record before the damage, nothing of a damaged batch
    got: list[tuple[int, bytes]] = []
    try:
        got.extend(Store(tmp_path).read("s"))
    except Error as exc:
        assert built.active.name in str(exc)
    assert got == expected, f"seed {seed} ({kind})"

    # the writer: opens, keeps exactly that, says what it cut
    caplog.clear()
    with DataDir(tmp_path) as data:
        log = data.stream("s")
        assert log.last_position == log.synced_position == kept, f"seed {seed} ({kind})"
        raw = encode_batch(5, 1, 1, [b"after"])
        log.append([(raw, verify_batch(raw))])
        log.sync()
    assert built.active.stat().st_size == cut_at + len(raw)
    assert list(Store(tmp_path).read("s")) == [*expected, (kept + 1, b"after")]
    cuts = [r for r in caplog.records if r.name == LOGGER and "cut " in r.getMessage()]
    figures = {f"damage_{kind}": 1, "records_kept": kept, "records_lost": len(built.records) - kept}
    if len(damaged) == cut_at:
        assert cuts == [], f"seed {seed} ({kind}): nothing to cut"
        return figures
    [record] = cuts
    message = record.getMessage()
    assert f"cut {len(damaged) - cut_at} bytes at offset {cut_at} of" in message
    assert built.active.name in message
    if good_after:
        assert record.levelno == logging.ERROR, f"seed {seed} ({kind}): {message}"
        records = sum(count for _, _, count in good_after)
        assert f"{len(good_after)} batches ({records} records" in message
        aside = built.active.with_name(f"{built.active.name}.cut-{cut_at}")
        assert aside.read_bytes() == damaged[cut_at:]
        figures["cut_in_the_middle"] = 1
        figures["good_batches_discarded"] = len(good_after)
    else:
        assert record.levelno == logging.WARNING, f"seed {seed} ({kind}): {message}"
        figures["cut_tail"] = 1
    return figures


@pytest.mark.parametrize("seed", range(60))
def test_random_damage(tmp_path: Path, caplog: pytest.LogCaptureFixture, seed: int) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    report("test_store_damage", run_seed(tmp_path, seed, caplog))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(60, 3060))
def test_random_damage_slow(tmp_path: Path, caplog: pytest.LogCaptureFixture, seed: int) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    report("test_store_damage", run_seed(tmp_path, seed, caplog))


def test_damage_in_a_closed_segment_is_refused_naming_the_file(tmp_path: Path) -> None:
    rng = random.Random(1)
    for _ in range(100):
        built = build(tmp_path, rng)
        closed = sorted((tmp_path / "streams" / "s").glob("*.seg"))[:-1]
        if closed:
            break
        for f in (tmp_path / "streams" / "s").iterdir():
            f.unlink()
    victim = rng.choice(closed)
    data = bytearray(victim.read_bytes())
    data[rng.randrange(len(data))] ^= 0x01
    victim.write_bytes(bytes(data))
    # closed segments are checked by headers only on open (they were synced and
    # CRC-checked while active), so a payload flip shows to readers, a header
    # flip to both; either way nothing of the damaged batch is ever served
    records = Store(tmp_path).read("s")
    got: list[tuple[int, bytes]] = []
    with pytest.raises(Error, match=victim.name):
        got.extend(records)
    assert got == list(enumerate(built.records[: len(got)], start=1))
