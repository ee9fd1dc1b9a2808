"""Crash recovery: a torn or corrupt tail is cut and logged, nothing that fails
its checks is ever read, damage in the middle of the active segment is cut
loudly (its bytes saved aside), and damage in a closed segment is refused.

Each test builds a stream, damages its files the way a crash (or a disk)
would, then checks both sides: the reader (`Store`, which must never cut) on
the damaged files, and the writer (`DataDir`), which must recover by itself.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from purelink.errors import Error
from purelink.protocol.wire import BatchHeader, encode_batch, encode_large_batch, verify_batch
from purelink.store import DataDir, Store
from purelink.store.format import EPOCH_RECORD, ProducerState

Batch = tuple[bytes, BatchHeader]
LOGGER = "purelink.store"


def make_batch(first_seq: int, records: list[bytes], *, large: bool = False) -> Batch:
    if large:
        raw = encode_large_batch(4, 2, first_seq, records[0])
    else:
        raw = encode_batch(4, 2, first_seq, records)
    return raw, verify_batch(raw)


GROUPS: list[list[bytes]] = [[b"one", b"two"], [b""], [b"three", b"four", b"five"]]
KEPT = [(1, b"one"), (2, b"two"), (3, b"")]  # everything but the last batch


def build(path: Path, last: Batch | None = None, **kwargs: int) -> tuple[Path, int]:
    """Write GROUPS (then `last` instead of GROUPS[-1]); return the active
    segment and the offset of the last batch in it."""
    seq = 1
    batches = []
    for group in GROUPS[:-1]:
        batches.append(make_batch(seq, group))
        seq += len(group)
    batches.append(last or make_batch(seq, GROUPS[-1]))
    folder = path / "streams" / "s"
    with DataDir(path, **kwargs) as data:
        log = data.stream("s")
        log.append(batches[:-1])
        offset = max(folder.glob("*.seg")).stat().st_size
        log.append(batches[-1:])
        log.sync()
    active = max(folder.glob("*.seg"))
    if active.stat().st_size == len(batches[-1][0]):  # the last batch rolled on its own
        offset = 0
    return active, offset


def reopen(path: Path) -> tuple[int, dict[int, ProducerState]]:
    with DataDir(path) as data:
        log = data.stream("s")
        assert log.synced_position == log.last_position
        return log.last_position, dict(log.producers)


@pytest.mark.parametrize("large", [False, True], ids=["table", "large"])
def test_cut_at_every_byte_of_the_last_batch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, large: bool
) -> None:
    last = make_batch(4, [b"L" * 300], large=True) if large else None
    active, offset = build(tmp_path, last)
    original = active.read_bytes()
    caplog.set_level(logging.WARNING, logger=LOGGER)
    for cut in range(offset, len(original)):
        active.write_bytes(original[:cut])
        caplog.clear()
        assert list(Store(tmp_path).read("s")) == KEPT  # the reader stops quietly
        assert Store(tmp_path).last("s") == 3
        assert reopen(tmp_path) == (3, {4: ProducerState(2, 3)})
        assert active.stat().st_size == offset
        warned = [r for r in caplog.records if r.name == LOGGER]
        if cut == offset:
            assert warned == []  # nothing torn: the file ends at a batch boundary
        else:
            assert len(warned) == 1
            message = warned[0].getMessage()
            assert "'s'" in message
            assert f"cut {cut - offset} bytes at offset {offset}" in message
            assert active.name in message
    # the position of the cut batch is handed out again, to the next append
    with DataDir(tmp_path) as data:
        data.stream("s").append([make_batch(4, [b"again"])])
    assert list(Store(tmp_path).read("s", 3)) == [(3, b""), (4, b"again")]


def test_a_flipped_bit_anywhere_in_the_last_batch_is_never_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    active, offset = build(tmp_path)
    original = active.read_bytes()
    caplog.set_level(logging.WARNING, logger=LOGGER)
    for at in range(offset, len(original)):
        damaged = bytearray(original)
        damaged[at] ^= 1 << (at % 8)
        active.write_bytes(bytes(damaged))
        assert list(Store(tmp_path).read("s")) == KEPT, f"byte {at}"
        caplog.clear()
        assert reopen(tmp_path)[0] == 3, f"byte {at}"
        assert active.read_bytes() == original[:offset]
        assert any(f"at offset {offset}" in r.getMessage() for r in caplog.records)


def test_zero_filled_tail_is_cut(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    active, _ = build(tmp_path)
    whole = active.read_bytes()
    active.write_bytes(whole + bytes(4096))
    caplog.set_level(logging.WARNING, logger=LOGGER)
    assert len(list(Store(tmp_path).read("s"))) == 6
    assert reopen(tmp_path)[0] == 6
    assert active.read_bytes() == whole
    assert f"cut 4096 bytes at offset {len(whole)}" in caplog.text


def test_damage_followed_by_good_batches_is_cut_loudly_and_saved(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Damage in the middle of the active segment: a reader refuses to read
    past it, the writer cuts there (a listener that refuses to start is worse)
    and logs at ERROR what the good batches after the damage held, after it
    saved the cut bytes next to the segment."""
    active, offset = build(tmp_path)
    original = active.read_bytes()
    damaged = bytearray(original)
    damaged[offset - 2] ^= 0xFF  # inside the payload of the second batch, the third is fine
    active.write_bytes(bytes(damaged))
    second = offset - (44 + 2)  # the second batch holds one empty record
    store = Store(tmp_path)
    records = store.read("s")
    assert [next(records), next(records)] == [(1, b"one"), (2, b"two")]
    with pytest.raises(Error, match=f"{active.name} is corrupt at offset {second}"):
        next(records)
    with pytest.raises(Error, match="corrupt"):
        store.last("s")
    assert active.read_bytes() == bytes(damaged)  # the reader never cuts
    caplog.set_level(logging.WARNING, logger=LOGGER)
    assert reopen(tmp_path) == (2, {4: ProducerState(2, 2)})
    assert active.read_bytes() == original[:second]
    aside = active.with_name(f"{active.name}.cut-{second}")
    assert aside.read_bytes() == bytes(damaged[second:])
    [record] = [r for r in caplog.records if r.name == LOGGER]
    assert record.levelno == logging.ERROR
    message = record.getMessage()
    assert f"cut {len(original) - second} bytes at offset {second} of" in message
    assert "1 batches (3 records, positions 4-6)" in message
    assert str(aside) in message
    assert list(Store(tmp_path).read("s")) == [(1, b"one"), (2, b"two")]
    # the writer goes on from there: position 3 is handed out again
    with DataDir(tmp_path) as data:
        data.stream("s").append([make_batch(3, [b"three again"])])
    assert list(Store(tmp_path).read("s", 2)) == [(2, b"two"), (3, b"three again")]
    # the position field is outside the CRC; contiguity catches a flip there too
    damaged = bytearray(original)
    damaged[second] ^= 0x10
    active.write_bytes(bytes(damaged))
    caplog.clear()
    assert reopen(tmp_path)[0] == 2
    assert "position" in caplog.text
    assert "1 batches (3 records" in caplog.text


def test_damaged_closed_segment_is_refused(tmp_path: Path) -> None:
    build(tmp_path, segment_bytes=60)
    segments = sorted((tmp_path / "streams" / "s").glob("*.seg"))
    assert len(segments) == 3
    closed = segments[1]
    closed.write_bytes(closed.read_bytes()[:-1])
    with pytest.raises(Error, match=f"{closed.name}"):
        DataDir(tmp_path, segment_bytes=60)
    records = Store(tmp_path).read("s")
    assert next(records) == (1, b"one")
    with pytest.raises(Error, match=f"{closed.name} is corrupt"):
        list(records)


def test_a_gap_between_segments_is_refused(tmp_path: Path) -> None:
    build(tmp_path, segment_bytes=60)
    folder = tmp_path / "streams" / "s"
    segments = sorted(folder.glob("*.seg"))
    segments[1].rename(folder / "00000000000000000099.seg")  # now 1, 4, 99: 3 is missing
    with pytest.raises(Error, match="starts at position 4 where position 3 should come next"):
        DataDir(tmp_path)
    with pytest.raises(Error, match="starts at position 4 where position 3 should come next"):
        list(Store(tmp_path).read("s"))


def test_empty_segment_at_the_tail_is_fine(tmp_path: Path) -> None:
    active, _ = build(tmp_path)
    empty = active.with_name("00000000000000000007.seg")  # a crash right after a roll
    empty.touch()
    assert reopen(tmp_path)[0] == 6
    assert Store(tmp_path).last("s") == 6
    with DataDir(tmp_path) as data:
        data.stream("s").append([make_batch(7, [b"seven"])])
    assert empty.stat().st_size > 0
    assert list(Store(tmp_path).read("s", 6)) == [(6, b"five"), (7, b"seven")]


def test_torn_epochs_file_is_repaired(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with DataDir(tmp_path) as data:
        log = data.stream("s")
        assert [log.new_epoch(9, durable=True) for _ in range(3)] == [1, 2, 3]
    epochs = tmp_path / "streams" / "s" / "epochs"
    epochs.write_bytes(epochs.read_bytes() + b"\x09\x00\x00\x00\x00\x00\x00")
    caplog.set_level(logging.WARNING, logger=LOGGER)
    with DataDir(tmp_path) as data:
        assert data.stream("s").new_epoch(9, durable=True) == 4
    assert "torn tail" in caplog.text
    assert epochs.stat().st_size == EPOCH_RECORD * 2  # compacted: one record, then the new one
    with DataDir(tmp_path) as data:
        assert data.stream("s").producers[9].epoch == 4
