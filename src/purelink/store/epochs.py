"""The epochs file: never hand a named producer the same epoch twice.

A named producer's new session takes epoch = 1 + the highest epoch known,
which fences older sessions (docs/reliability.md, guarantee 5).  Batches carry their epoch, so
the log alone remembers every epoch that *wrote* something; a session that
connected and wrote nothing would be forgotten, and after a restart its epoch
could be handed out again -- two live sessions with one epoch.  So each epoch
given to a named producer is appended here and fdatasynced before the
listener answers the handshake.

The file is a run of 24-byte records (u64 producer, u32 epoch, u64 owner --
the link instance the epoch was handed to -- and a u32 CRC-32C of the 20
bytes before it).  The owner lets a link whose ACCEPT was lost (and that
therefore still asks with its older epoch) be told apart from an older,
fenced instance.  A torn tail fails its CRC: it is ignored and cut on
open.  The file is rewritten compactly (temporary file, fsync, rename) on
open when most of its records are superseded.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Final

from .format import EPOCH_RECORD, decode_epochs, encode_epoch
from .segment import fsync_dir

__all__ = ["EpochsFile"]

log = logging.getLogger("purelink.store")

_COMPACT_SLACK: Final = 1024
"""Superseded records tolerated before the file is rewritten on open."""


class EpochsFile:
    """The epochs file of one stream folder; `epochs` holds what it says."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = b""
        self.epochs, valid, records, self.owners = decode_epochs(data)
        """The highest epoch recorded per producer (and, in owners, whose it is)."""
        if valid < len(data):
            log.warning(
                "epochs file %s: ignoring %d bytes of torn tail at offset %d",
                path,
                len(data) - valid,
                valid,
            )
        if records > len(self.epochs) + _COMPACT_SLACK or valid < len(data):
            self._rewrite()

    def _rewrite(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        data = b"".join(
            encode_epoch(p, e, self.owners.get(p, 0)) for p, e in sorted(self.epochs.items())
        )
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)

    def record(self, producer: int, epoch: int, owner: int = 0) -> None:
        """Append one record and make it durable before returning."""
        if self._fd is None:
            created = not self.path.exists()
            self._fd = os.open(
                self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644
            )
            if created:
                fsync_dir(self.path.parent)
        written = os.write(self._fd, encode_epoch(producer, epoch, owner))
        if written != EPOCH_RECORD:  # pragma: no cover - a 24-byte append is not split
            raise OSError(f"short write to {self.path}")
        os.fdatasync(self._fd)
        if epoch > self.epochs.get(producer, 0):
            self.epochs[producer] = epoch
            self.owners[producer] = owner

    def close(self) -> None:
        """Close the file if it was opened for writing."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
