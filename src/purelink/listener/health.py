"""Whether a listener's store can take records now: what `/readyz` answers.

Why a module of its own: readiness is a judgement over the store (a data
directory's file system, the streams held for lack of room or stopped by a
failed sync), apart from the loop that writes it; listener.py gathers what it
knows and asks here.  The answer is a few words for an operator, or None.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping

from .storage import MinFree

__all__ = ["store_problem"]


def store_problem(
    path: str | os.PathLike[str] | None,
    min_free: MinFree,
    held: Mapping[str, str],
    failed: Collection[str],
) -> str | None:
    """Why the store cannot take records now, or None.

    `path` is the data directory (None: a cluster, no file system to look at);
    `held` the streams with no room and why (StorageDriver.rooms()); `failed`
    the streams a write or sync failed on (a restart recovers them).
    """
    if path is not None:
        problem = _directory_problem(path, min_free)
        if problem is not None:
            return problem
    if failed:
        names = sorted(failed)
        return f"stream {names[0]} stopped after a failed write (a restart recovers it)"
    if held:
        stream, why = sorted(held.items())[0]
        shown = "below the --min-free mark" if why == "min_free" else "no room on the disk"
        return f"stream {stream} stores nothing: {shown}"
    return None


def _directory_problem(path: str | os.PathLike[str], min_free: MinFree) -> str | None:
    """A data directory that cannot be written: gone, read-only, or below the mark."""
    try:
        space = os.statvfs(path)
    except OSError as exc:
        return f"data directory unreadable: {exc.strerror or exc}"
    if space.f_flag & os.ST_RDONLY:
        return "data directory on a read-only file system"
    if not os.access(path, os.W_OK):
        return "data directory not writable"
    free = space.f_bavail * space.f_frsize
    mark = min_free.of(space.f_blocks * space.f_frsize)
    if free < mark:
        return f"data directory below the --min-free mark ({free:,} bytes free, mark {min_free})"
    return None
