"""`purelink read`, `tail` and `streams`: the verbs that print what a store holds.

Why it exists: `read` and `streams` open a store (a directory, or a JetStream
cluster) read-only, beside a listener that may be writing it; `tail` reads a
stream from a listener over TCP (subscribe.py), and `streams tcp://...` asks
a listener for its streams (listing.py).  All three print records or a table
to stdout (output.py has the shapes), and a closed stdout ends them quietly
(command.py's main).

A stream that does not exist is said on stderr (`purelink read: no stream
'ordrs' in DIR`) and reads as empty: exit 0, as a script reading a stream
that has no records yet expects; `--must-exist` makes it exit 1 instead.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar

from .. import subscribe
from .args import (
    add_from,
    add_stream,
    data_dir,
    int_at_least,
    require_store,
    seconds,
    url_type,
)
from .common import PROG, UsageError, client_secret, wakeup_pipe
from .output import (
    RECORD_FORMATS,
    STREAM_FORMATS,
    print_records,
    print_streams,
    print_timed_records,
)

if TYPE_CHECKING:  # the store is imported by the verbs that read one (command.py)
    from ..store.reader import StoreReader, StreamInfo
from .when import add_since

__all__ = [
    "add_read_arguments",
    "add_streams_arguments",
    "add_tail_arguments",
    "cmd_read",
    "cmd_streams",
    "cmd_tail",
]

_Item = TypeVar(
    "_Item", tuple[int, bytes], tuple[int, float | None, bytes]
)  # a record, or a timed one


def add_read_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data",
        required=True,
        type=data_dir,
        metavar="DIR|nats://...",
        help="store directory, or a NATS JetStream cluster",
    )
    add_stream(p)
    add_from(p)
    add_to(p)
    add_since(p, until=True)
    p.add_argument("--follow", action="store_true", help="keep printing new records")
    add_output_arguments(p)


def add_to(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--to", type=int_at_least(1), metavar="M", help="last position (inclusive): end there"
    )


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    """--format and --must-exist, as `read` and `tail` take them."""
    p.add_argument(
        "--format",
        choices=RECORD_FORMATS,
        default="lines",
        help="lines: each payload and a newline; json: one object per line "
        '({"position", "time" (read), "payload"} when the payload is UTF-8, else '
        '"payload_base64")',
    )
    p.add_argument(
        "--must-exist",
        action="store_true",
        help="exit 1 when the stream does not exist (default: say so on stderr, exit 0)",
    )


def add_tail_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", type=url_type, metavar="URL", help="the listener's tcp://HOST:PORT")
    add_stream(p)
    add_from(p)
    add_to(p)
    add_since(p, until=False)
    p.add_argument("--follow", action="store_true", help="keep printing new records")
    add_output_arguments(p)
    add_key_arguments(p)
    p.add_argument(
        "--reconnect",
        type=seconds,
        default=0.0,
        metavar="DURATION",
        help="if the connection breaks, resume where it stopped, trying for this long",
    )


def add_key_arguments(p: argparse.ArgumentParser) -> None:
    """--secret-file, --key-id and --timeout: how `tail` and `streams` reach a listener."""
    p.add_argument("--secret-file", metavar="F", help="the secret (of the key --key-id names)")
    p.add_argument("--key-id", metavar="ID", help="the key's id in the listener's --keys-file")
    p.add_argument(
        "--timeout",
        type=seconds,
        default=10.0,
        metavar="DURATION",
        help="bounds each connect, and without --follow the wait for the first answer (10)",
    )


def add_streams_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "url",
        nargs="?",
        metavar="tcp://HOST:PORT",
        help="a listener's TCP address: ask it for its streams (instead of --data)",
    )
    p.add_argument(
        "--data",
        type=data_dir,
        metavar="DIR|nats://...|tcp://...",
        help="store directory, a NATS JetStream cluster, or a listener's TCP address",
    )
    p.add_argument(
        "--format",
        choices=STREAM_FORMATS,
        default="table",
        help="table (default), or json: one object per stream and line",
    )
    add_key_arguments(p)


def cmd_read(args: argparse.Namespace) -> int:
    """Print records [--from, --to] of a stream; with --follow, keep going.

    An unknown stream reads as an empty one, said on stderr (with --follow,
    wait for it to appear); exit 0, or 1 with --must-exist.  A stream comes
    into being with its first record, so "unknown" and "empty" are the same
    state, as `Store.first/last` = 0, 0 say.
    """
    from ..store.store import open_reader  # noqa: PLC0415 -- see the imports

    if args.to is not None and args.start is not None and args.to < args.start:
        raise UsageError(f"--to {args.to} is before --from {args.start}")
    _check_times(args)
    store = open_reader(str(require_store(args.data)))
    stream = args.stream
    first = store.first(stream)
    missing = not first and stream not in store.streams()
    if missing and _no_stream("read", stream, f"in {args.data}", args.must_exist, args.follow):
        return 1
    stop = None if args.to is None else args.to + 1  # Store.read's stop is exclusive
    if args.since is not None:  # found by seeking (docs/store.md): a position from here on
        args.start = store.position_at(stream, args.since)
        if args.start > store.last(stream) and not args.follow:
            return 0
    if args.until is not None:
        stop = store.position_at(stream, args.until)
    out = sys.stdout.buffer
    # Default start: the first record retained; with --follow on an empty (or
    # unknown) stream, the next record to come.
    start: int = args.start or first or (store.last(stream) + 1 if args.follow else 0)
    if not start:
        return 0
    flush = out.flush
    if args.format == "json":  # with each record's stored time
        print_timed_records(
            out.write, _items(store, store.read_timed, stream, start, stop, args.follow, flush)
        )
    else:
        print_records(
            out.write, _items(store, store.read, stream, start, stop, args.follow, flush), "lines"
        )
    out.flush()
    return 0


def _items(
    store: StoreReader,
    read: Callable[..., Iterator[_Item]],
    stream: str,
    start: int,
    stop: int | None,
    follow: bool,
    flush: Callable[[], object],
) -> Iterator[_Item]:
    """`read`'s items (Store.read or read_timed) from `start`; with `follow`, for
    ever, flushing the output before each wait: on a data directory by inotify
    (store/follow.py), on a cluster after each item (it gives no signal first)."""
    from ..store.datadir_reader import DataDirReader  # noqa: PLC0415 -- see the imports
    from ..store.follow import follow_records  # noqa: PLC0415

    if not follow:
        return read(stream, start, stop)
    if isinstance(store, DataDirReader):
        return follow_records(store, stream, start, stop, on_wait=flush, read=read)
    return _flushing(read(stream, start, stop, follow=True), flush)


def _no_stream(verb: str, stream: str, where: str, must_exist: bool, follow: bool) -> bool:
    """Say on stderr that `stream` does not exist; True: exit 1 (--must-exist)."""
    waiting = "; waiting for its first record" if follow and not must_exist else ""
    sys.stderr.write(f"{PROG} {verb}: no stream {stream!r} {where}{waiting}\n")
    sys.stderr.flush()
    return must_exist


def _check_times(args: argparse.Namespace) -> None:
    """--since/--until do what --from/--to do, by time: one or the other."""
    if args.since is not None and args.start is not None:
        raise UsageError("give --from or --since, not both")
    if args.until is not None and args.to is not None:
        raise UsageError("give --to or --until, not both")
    if args.since is not None and args.until is not None and args.until < args.since:
        raise UsageError("--until is before --since")
    if args.follow and args.until is not None and args.until > time.time():
        raise UsageError(
            "--until names a time to come: with --follow it must be past (a record's "
            "time is known once it is stored; stop a follower with Ctrl-C or --to)"
        )


def _flushing(records: Iterable[_Item], flush: Callable[[], object]) -> Iterator[_Item]:
    """The records, with `flush()` after each (what follows a store that gives no
    signal before it waits)."""
    for record in records:
        yield record
        flush()


def cmd_tail(args: argparse.Namespace) -> int:
    """Print a stream's records read from a listener over TCP (subscribe.py):
    from --from (default: the first retained) to --to (inclusive, then end),
    and with --follow, for ever."""
    secret = client_secret(args)
    if args.to is not None and args.start is not None and args.to < args.start:
        raise UsageError(f"--to {args.to} is before --from {args.start}")
    where = f"at {args.url}"
    if args.follow and args.must_exist and not _remote_exists(args, secret):
        return int(_no_stream("tail", args.stream, where, True, True))
    since = None if args.since is None else datetime.fromtimestamp(args.since, UTC)
    try:
        subscription = subscribe(
            args.url,
            args.stream,
            start=args.start or 0,
            follow=args.follow,
            secret=secret,
            key_id=args.key_id,
            timeout=args.timeout,
            reconnect=args.reconnect,
            on_held=_say_held(args.stream),
            since=since,
        )
    except ValueError as exc:  # not a tcp:// URL
        raise UsageError(str(exc)) from None
    out = sys.stdout.buffer
    with subscription, wakeup_pipe() as wake:
        subscription.interrupt_fd = wake  # a Ctrl-C just before a wait is not lost
        for chunk in subscription.chunks():  # one flush per burst, not per record
            records, done = _upto(chunk, args.to)
            print_records(out.write, records, args.format)
            out.flush()
            if done:
                return 0
    if subscription.unknown_stream:
        return int(_no_stream("tail", args.stream, where, args.must_exist, False))
    return 0


def _upto(chunk: list[tuple[int, bytes]], to: int | None) -> tuple[list[tuple[int, bytes]], bool]:
    """The records of `chunk` up to position `to` (inclusive), and whether that
    is the end (`to` printed, or passed: retention may have taken it)."""
    if to is None or chunk[-1][0] < to:
        return chunk, False
    return [record for record in chunk if record[0] <= to], True


def _remote_exists(args: argparse.Namespace, secret: bytes | None) -> bool:
    """Whether the listener at args.url lists args.stream (for the key, if any)."""
    from ..listing import list_streams  # noqa: PLC0415 -- only with --must-exist

    try:
        infos = list_streams(args.url, secret=secret, key_id=args.key_id, timeout=args.timeout)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return any(info.name == args.stream for info in infos)


HELD: dict[str | None, str] = {
    "disk_full": "stores nothing for now: the listener has no room on its disk (full, "
    "or below its --min-free); its records follow once there is room",
    "stream_failed": "stores nothing more: the listener's store failed on it (see the "
    "listener's log); a restart of the listener recovers it",
    None: "is storing again",
}
"""What `tail` says on stderr when the listener says a stream is held, or goes on."""


def _say_held(stream: str) -> Callable[[str | None], None]:
    def say(why: str | None) -> None:
        text = HELD.get(why, f"stores nothing for now ({why})")
        sys.stderr.write(f"{PROG} tail: stream {stream} {text}\n")
        sys.stderr.flush()

    return say


def cmd_streams(args: argparse.Namespace) -> int:
    """List the streams of a store (--data DIR|nats://...) or of a listener
    (tcp://HOST:PORT, as the positional URL or as --data)."""
    if args.url is not None and args.data is not None:
        raise UsageError("streams takes a listener's tcp:// URL or --data, not both")
    where = args.url if args.url is not None else args.data
    if where is None:
        raise UsageError("streams needs --data DIR|nats://... or a listener's tcp://HOST:PORT")
    if "://" in where and not where.startswith("nats://"):
        infos = _remote_streams(args, where)
    else:
        if args.secret_file is not None or args.key_id is not None:
            raise UsageError("--secret-file and --key-id are for a listener's tcp:// URL")
        infos = _local_streams(where)
    print_streams(sys.stdout.write, infos, args.format)
    return 0


def _local_streams(where: str) -> list[StreamInfo]:
    from ..store.store import Store  # noqa: PLC0415 -- see the imports

    store = Store(str(require_store(where)))
    with store:
        return [store.stream_info(name) for name in store.streams()]


def _remote_streams(args: argparse.Namespace, url: str) -> list[StreamInfo]:
    from ..listing import list_streams  # noqa: PLC0415 -- see the imports

    secret = client_secret(args)
    try:
        return list_streams(url, secret=secret, key_id=args.key_id, timeout=args.timeout)
    except ValueError as exc:  # not a tcp:// URL
        raise UsageError(str(exc)) from None
