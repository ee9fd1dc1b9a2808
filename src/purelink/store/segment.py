"""One segment file: writing it, and recovering a stream's segments on open.

A stream is a folder of segment files named by the position of their first
record (``00000000000000000001.seg``), so that names sort in stream order.
Only the last segment (the *active* one) is ever written; earlier ones are
*closed* and immutable.  A segment is closed only after it was fdatasynced,
and its successor is created (and the folder fsynced) only after that, so a
crash can tear the active segment only -- never a closed one.

Recovery therefore trusts closed segments' structure and checks it cheaply
(headers, lengths, positions; a `.sum` snapshot lets it skip even that), and
scans the active segment in full, CRCs included.  The active segment is cut
(ftruncate + fdatasync) at its first torn or corrupt batch, and the cut is
logged.  That holds even when batches that still pass their CRC follow the
damage (docs/reliability.md, guarantee 3: the store recovers by itself; a listener that
refuses to start serves nobody).  A crash never causes that pattern, but a
power cut can (pages of unsynced writes reach the disk out of order) and so
can a bad disk, where the batches after the damage may hold records that
links were told are stored.  So that case is logged at ERROR with what was
discarded, and the cut bytes are first saved (and synced) next to the
segment as `<segment>.cut-<offset>` for an operator; a link that was told
about a discarded record fails loudly with LinkError when it reconnects
(docs/reliability.md, guarantee 4).  Damage in a closed segment is still refused with
`purelink.Error` naming the file: a crash cannot cause it, and cutting there
would drop every later segment.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from purelink.errors import Error
from purelink.protocol.wire import BatchHeader

from .format import (
    CHUNK,
    SEGMENT_SUFFIX,
    SUMMARY_SUFFIX,
    ProducerState,
    ScanState,
    decode_summary,
    encode_summary,
    parse_segment_name,
    scan_batches,
    segment_name,
    valid_after,
)

__all__ = ["SegmentWriter", "fsync_dir", "list_segments", "recover", "write_summary"]

log = logging.getLogger("purelink.store")


def list_segments(folder: Path) -> list[tuple[int, Path]]:
    """(base, path) of every segment file in folder, in stream order."""
    found = []
    with os.scandir(folder) as entries:
        for entry in entries:
            base = parse_segment_name(entry.name)
            if base is not None:
                found.append((base, Path(entry.path)))
    found.sort()
    return found


def fsync_dir(folder: Path) -> None:
    """Make the creation (or removal, or rename) of entries in folder durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SegmentWriter:
    """The active segment of a stream, open for appending at `size`."""

    __slots__ = ("base", "fd", "path", "size")

    def __init__(self, fd: int, base: int, path: Path, size: int) -> None:
        self.fd = fd
        """The open file (read-write)."""
        self.base = base
        """Position of the segment's first record."""
        self.path = path
        """The file."""
        self.size = size
        """Bytes of whole batches in the file: where the next batch goes."""

    @classmethod
    def create(cls, folder: Path, base: int) -> SegmentWriter:
        """Create a new, empty segment and make its name durable."""
        path = folder / segment_name(base)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        fsync_dir(folder)
        return cls(fd, base, path, 0)

    def write(self, iov: Sequence[bytes | memoryview], total: int) -> None:
        """Write the buffers (`total` bytes) at the end of the segment, all or
        nothing: after an error the file is cut back and the error raised."""
        fd, offset, done = self.fd, self.size, 0
        try:
            done = os.pwritev(fd, iov, offset)
            while done < total:  # a short write: rare, so the slow way is fine
                rest = memoryview(b"".join(iov))[done:]
                done += os.pwrite(fd, rest, offset + done)
        except OSError:
            if done:
                with contextlib.suppress(OSError):  # the original error is what matters
                    os.ftruncate(fd, offset)
            raise
        self.size = offset + total

    def close(self) -> None:
        """Close the file (no sync)."""
        os.close(self.fd)


def write_summary(
    folder: Path, base: int, size: int, next_position: int, producers: dict[int, ProducerState]
) -> None:
    """Write the `.sum` snapshot of a segment being closed.  Not synced: a torn
    summary fails its CRC and recovery falls back to scanning headers."""
    data = encode_summary(
        base, size, next_position, ((p, s.epoch, s.last_seq) for p, s in producers.items())
    )
    path = (folder / segment_name(base)).with_suffix(SUMMARY_SUFFIX)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _note(producers: dict[int, ProducerState], header: BatchHeader) -> None:
    state = producers.get(header.producer)
    if state is None:
        producers[header.producer] = ProducerState(header.epoch, header.last_seq)
        return
    state.last_seq = header.last_seq
    state.epoch = max(state.epoch, header.epoch)


def _read_summary(path: Path, base: int) -> tuple[int, int, dict[int, ProducerState]] | None:
    """(size, next_position, producers) from a closed segment's summary, if it
    is whole and matches the segment."""
    sum_path = path.with_suffix(SUMMARY_SUFFIX)
    try:
        summary = decode_summary(sum_path.read_bytes())
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    if summary is None or summary.base != base or summary.size != size:
        return None
    producers = {p: ProducerState(e, s) for p, e, s in summary.producers}
    return size, summary.next_position, producers


def _read_retained_summary(folder: Path, first: int) -> dict[int, ProducerState] | None:
    """The producers as of position `first`, from the `.sum` that retention kept
    of the newest segment it removed (its `.seg` is gone; see retention.py)."""
    best: tuple[int, dict[int, ProducerState]] | None = None
    with os.scandir(folder) as entries:
        names = [e.name for e in entries if e.name.endswith(SUMMARY_SUFFIX)]
    for name in names:
        base = parse_segment_name(name.removesuffix(SUMMARY_SUFFIX) + SEGMENT_SUFFIX)
        if base is None or base >= first:
            continue
        with contextlib.suppress(OSError):
            summary = decode_summary((folder / name).read_bytes())
            if (
                summary is not None
                and (summary.next_position, summary.base) == (first, base)
                and (best is None or base > best[0])
            ):
                best = (base, {p: ProducerState(e, q) for p, e, q in summary.producers})
    return best[1] if best is not None else None


def _scan_closed(path: Path, base: int, producers: dict[int, ProducerState]) -> int:
    """Check a closed segment's structure and note its batches; return the
    position after its last record.  Any problem is corruption."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        state = ScanState(0, base)
        for _, _, header in scan_batches(fd, state, size, verify=False):
            _note(producers, header)
    finally:
        os.close(fd)
    if state.problem is not None:
        raise Error(
            f"closed segment {path} is damaged at offset {state.offset}: {state.detail}; "
            "refusing to open the stream (move the damaged file aside to proceed)"
        )
    return state.position


def _recover_active(
    stream: str, path: Path, base: int, producers: dict[int, ProducerState]
) -> tuple[SegmentWriter, int]:
    """Scan the active segment in full, cut a torn or corrupt tail, sync it;
    return it with the position after its last record."""
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        state = ScanState(0, base)
        for _, _, header in scan_batches(fd, state, size):
            _note(producers, header)
        if state.problem is not None:
            _cut(stream, fd, path, state, size)
        os.fdatasync(fd)  # everything kept is durable before we report it so
    except BaseException:
        os.close(fd)
        raise
    return SegmentWriter(fd, base, path, state.offset), state.position


def _cut(stream: str, fd: int, path: Path, state: ScanState, size: int) -> None:
    """Cut the active segment at the first bad batch, saying what went."""
    offset = state.offset
    # even an "incomplete" batch may be a damaged length field with good batches after it
    found = valid_after(fd, offset, size)
    if not found.batches:
        os.ftruncate(fd, offset)
        log.warning(
            "stream %r: cut %d bytes at offset %d of %s (%s: %s)",
            stream,
            size - offset,
            offset,
            path,
            state.problem,
            state.detail,
        )
        return
    aside = path.with_name(f"{path.name}.cut-{offset}")
    try:
        _save(fd, offset, size, aside)
        saved = f"the cut bytes are saved in {aside}"
    except OSError as exc:
        saved = f"the cut bytes could NOT be saved ({exc})"
    os.ftruncate(fd, offset)
    log.error(
        "stream %r: cut %d bytes at offset %d of %s (%s: %s); DAMAGE IN THE MIDDLE: "
        "%d batches (%d records, positions %d-%d) after the damage passed their CRC "
        "and were discarded with it; records that links were told are stored may be "
        "among them (a running link that was told fails with LinkError on reconnect); %s",
        stream,
        size - offset,
        offset,
        path,
        state.problem,
        state.detail,
        found.batches,
        found.records,
        found.first_position,
        found.last_position,
        saved,
    )


def _save(fd: int, offset: int, end: int, aside: Path) -> None:
    """Copy bytes [offset, end) of fd into `aside`, durably."""
    out = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        at = offset
        while at < end:
            chunk = os.pread(fd, min(CHUNK, end - at), at)
            if not chunk:
                break
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
            at += len(chunk)
        os.fsync(out)
    finally:
        os.close(out)
    fsync_dir(aside.parent)


def recover(
    folder: Path, stream: str, producers: dict[int, ProducerState]
) -> tuple[int, SegmentWriter, int]:
    """Open a stream folder for writing: (first base, active segment, last
    position), with `producers` filled in.  Creates the first segment of an
    empty folder."""
    segments = list_segments(folder)
    if not segments:
        return 1, SegmentWriter.create(folder, 1), 0
    start, position = 0, segments[0][0]
    for i in range(len(segments) - 2, -1, -1):
        found = _read_summary(segments[i][1], segments[i][0])
        if found is not None:
            _, position, snapshot = found
            producers.update(snapshot)
            start = i + 1
            break
    else:  # retention removed older segments: start from the state they left
        if position > 1:
            producers.update(_read_retained_summary(folder, position) or {})
    for base, path in segments[start:]:
        if base != position:
            raise Error(
                f"stream {stream!r}: segment {path} starts at position {base} "
                f"where position {position} should come next"
            )
        if path is segments[-1][1]:
            break
        position = _scan_closed(path, base, producers)
    base, path = segments[-1]
    active, position = _recover_active(stream, path, base, producers)
    return segments[0][0], active, position - 1
