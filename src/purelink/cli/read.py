"""`purelink read`, `tail` and `streams`: the verbs that print what a store holds.

Why it exists: `read` and `streams` open a store (a directory, or a JetStream
cluster) read-only, beside a listener that may be writing it; `tail` reads a
stream from a listener over TCP (subscribe.py).  All three print records or
a table to stdout, and a closed stdout ends them quietly (command.py's main).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime

from .. import subscribe
from .args import (
    add_from,
    data_dir,
    int_at_least,
    require_store,
    seconds,
    stream_type,
    url_type,
)
from .common import PROG, UsageError, client_secret
from .when import add_since, format_time

__all__ = [
    "add_read_arguments",
    "add_streams_arguments",
    "add_tail_arguments",
    "cmd_read",
    "cmd_streams",
    "cmd_tail",
]


def add_read_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data",
        required=True,
        type=data_dir,
        metavar="DIR|nats://...",
        help="store directory, or a NATS JetStream cluster",
    )
    p.add_argument("--stream", required=True, type=stream_type, metavar="S")
    add_from(p)
    p.add_argument("--to", type=int_at_least(1), metavar="M", help="last position (inclusive)")
    add_since(p, until=True)
    p.add_argument("--follow", action="store_true", help="keep printing new records")
    p.add_argument("--format", choices=("lines", "json"), default="lines")


def add_tail_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", type=url_type, metavar="URL", help="the listener's tcp://HOST:PORT")
    p.add_argument("--stream", required=True, type=stream_type, metavar="S")
    add_from(p)
    add_since(p, until=False)
    p.add_argument("--follow", action="store_true", help="keep printing new records")
    p.add_argument("--format", choices=("lines", "json"), default="lines")
    p.add_argument("--secret-file", metavar="F", help="the secret (of the key --key-id names)")
    p.add_argument("--key-id", metavar="ID", help="the key's id in the listener's --keys-file")
    p.add_argument(
        "--timeout",
        type=seconds,
        default=10.0,
        metavar="SECONDS",
        help="bounds each connect, and without --follow the wait for the first answer (10)",
    )
    p.add_argument(
        "--reconnect",
        type=seconds,
        default=0.0,
        metavar="SECONDS",
        help="if the connection breaks, resume where it stopped, trying for this long",
    )


def add_streams_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--data",
        required=True,
        type=data_dir,
        metavar="DIR|nats://...",
        help="store directory, or a NATS JetStream cluster",
    )


def cmd_read(args: argparse.Namespace) -> int:
    """Print records [--from, --to] of a stream; with --follow, keep going.

    An unknown stream reads as an empty one: no output, exit 0 (with --follow,
    wait for it to appear).  A stream comes into being with its first record,
    so "unknown" and "empty" are the same state, as `Store.first/last` = 0, 0 say.
    """
    from ..store.datadir_reader import DataDirReader  # noqa: PLC0415 -- see the imports
    from ..store.follow import follow_records  # noqa: PLC0415
    from ..store.store import open_reader  # noqa: PLC0415

    if args.to is not None and args.start is not None and args.to < args.start:
        raise UsageError(f"--to {args.to} is before --from {args.start}")
    _check_times(args)
    store = open_reader(str(require_store(args.data)))
    stream = args.stream
    stop = None if args.to is None else args.to + 1  # Store.read's stop is exclusive
    if args.since is not None:  # found by seeking (docs/store.md): a position from here on
        args.start = store.position_at(stream, args.since)
        if args.start > store.last(stream) and not args.follow:
            return 0
    if args.until is not None:
        stop = store.position_at(stream, args.until)
    out = sys.stdout.buffer
    write = out.write
    # Default start: the first record retained; with --follow on an empty (or
    # unknown) stream, the next record to come.
    start: int = args.start or store.first(stream) or (store.last(stream) + 1 if args.follow else 0)
    if not start:
        return 0
    if args.follow and isinstance(store, DataDirReader):  # inotify (store/follow.py), flushing
        records = follow_records(store, stream, start, stop, on_wait=out.flush)
    elif args.follow:  # a JetStream cluster: each record as it comes
        records = _flushing(store.read(stream, start=start, stop=stop, follow=True), out.flush)
    else:
        records = store.read(stream, start=start, stop=stop)
    _print_records(write, records, args.format)
    out.flush()
    return 0


def _check_times(args: argparse.Namespace) -> None:
    """--since/--until do what --from/--to do, by time: one or the other."""
    if args.since is not None and args.start is not None:
        raise UsageError("give --from or --since, not both")
    if args.until is not None and args.to is not None:
        raise UsageError("give --to or --until, not both")
    if args.since is not None and args.until is not None and args.until < args.since:
        raise UsageError("--until is before --since")


def _flushing(
    records: Iterable[tuple[int, bytes]], flush: Callable[[], object]
) -> Iterator[tuple[int, bytes]]:
    """The records, with `flush()` after each (what follows a store that gives no
    signal before it waits)."""
    for record in records:
        yield record
        flush()


def _print_records(
    write: Callable[[bytes], object], records: Iterable[tuple[int, bytes]], fmt: str
) -> None:
    """`lines`: the payload and a newline; `json`: {"position", "payload" in base64}."""
    if fmt == "lines":
        for _, payload in records:
            write(payload)
            write(b"\n")
        return
    b64 = base64.b64encode
    for position, payload in records:
        line = json.dumps({"position": position, "payload": b64(payload).decode()})
        write(line.encode() + b"\n")


def cmd_tail(args: argparse.Namespace) -> int:
    """Print a stream's records read from a listener over TCP (subscribe.py):
    from --from (default: the first retained), and with --follow, for ever."""
    secret = client_secret(args)
    if args.since is not None and args.start is not None:
        raise UsageError("give --from or --since, not both")
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
    write = out.write
    with subscription:
        for chunk in subscription.chunks():  # one flush per burst, not per record
            _print_records(write, chunk, args.format)
            out.flush()
    return 0


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
    from ..store.store import Store  # noqa: PLC0415 -- see the imports

    directory = require_store(args.data)
    store = Store(str(directory))
    infos = [store.stream_info(name) for name in store.streams()]
    rows = [(i.name, i.first, i.last, i.records, i.bytes) for i in infos]
    header = ("stream", "first", "last", "records", "bytes", "last stored")
    cells = [
        header,
        *[
            (r[0], *(str(n) for n in r[1:]), format_time(i.last_time))
            for r, i in zip(rows, infos, strict=True)
        ],
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        left = row[0].ljust(widths[0])
        right = "  ".join(cell.rjust(w) for cell, w in zip(row[1:], widths[1:], strict=True))
        print(f"{left}  {right}")
    return 0
