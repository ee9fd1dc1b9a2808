"""The `purelink` command: serve, send, read, tail, streams, demo, bench (README: Command line).

Why it exists: the command line is the product's public face for people who
do not write Python against it, and for the one-command demo.  It is a thin
shell over the public API (the README's Python API); it holds no protocol or
storage logic of its own.

Exit codes, for every verb (the README's command line):

* 0   success;
* 1   the operation failed: an unreachable listener (`ConnectError`), any other
      `purelink.Error`, an OS error such as an address in use, a demo whose
      read-back differs;
* 2   bad arguments: argparse errors, a malformed address, stream or producer
      name, a number out of range, a missing file, a refused non-loopback bind,
      a --data that is empty or not a store;
* 130 interrupted by SIGINT (Ctrl-C), quietly -- `send` says what was stored;
      a demo stopped by SIGTERM or SIGHUP exits 143 or 129, cleaned up.

Every failure is ONE line on stderr, `purelink: error: ...`, never a usage dump
and never a traceback.  A closed stdout (`purelink read ... | head`) exits 0
quietly.  `send` lives in _cli_send.py, `bench` in _cli_bench.py.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import json
import logging
import os
import select
import signal
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, NoReturn

from . import ConnectError, Error, __version__, _address, subscribe
from ._cli_bench import cmd_bench
from ._cli_common import (
    PROG,
    UsageError,
    client_secret,
    fail,
    format_address,
    read_secret,
    silence_stdout,
)
from ._cli_send import cmd_send
from .protocol.names import is_valid_name, validate_stream_name

if TYPE_CHECKING:
    from .listener import Listener
    from .protocol.keys import KeyTable

# The listener, the store and the demo are imported by the verbs that use them:
# `purelink send` is what a shell script runs once per job, and should not pay
# for importing them (docs/performance.md, "short-lived processes").

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit code 2.

    argparse's own `error` prints the whole usage block first; the README's command line
    wants one line.  Sub-parsers inherit this class (argparse creates them with
    `type(parent)`), so every verb behaves the same.
    """

    def error(self, message: str) -> NoReturn:
        fail(message)
        raise SystemExit(2)


# --- argument types: each raises ArgumentTypeError, which argparse reports ---


def _bind_address(text: str) -> str | None:
    """--udp/--tcp value: "HOST:PORT", or "none" to disable the transport."""
    if text.lower() == "none":
        return None
    try:
        _address.parse_hostport(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _url(text: str) -> str:
    """send's URL: udp://HOST:PORT or tcp://HOST:PORT (IPv6 as [ADDR])."""
    try:
        _address.parse_url(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _stream(text: str) -> str:
    """A stream name by the store's own rule (protocol/names.py, the README)."""
    try:
        return validate_stream_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _producer(text: str) -> str:
    """A producer name: the same rule as a stream's, checked here, not by the listener."""
    if not is_valid_name(text):
        raise argparse.ArgumentTypeError(
            f"bad producer name {text[:40]!r}: use 1-200 characters of A-Z a-z 0-9 . _ -, "
            "not starting with '.'"
        )
    return text


MAX_POSITION = (1 << 64) - 1
"""The largest position there can be (a u64 on the wire and in the store)."""


def _add_from(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--from",
        dest="start",
        type=_int_at_least(1, MAX_POSITION),
        metavar="N",
        help="first position (default, and 1: the first record retained; "
        "a later position below it is an error naming it)",
    )


def _int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}: {text!r}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high:,}: {text!r}")
        return value

    parse.__name__ = "integer"
    return parse


MAX_SECONDS = 1e9
"""Longer than any wait means (31 years), and within what every timeout call takes."""


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds: {text!r}")
    if not value <= MAX_SECONDS:  # inf, or a value the OS timeouts overflow on
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SECONDS:g} seconds: {text!r}")
    return value


# --- helpers shared by the verbs ---


def _data_dir(text: str) -> str:
    """--data: a directory's path, or a JetStream cluster's nats://H:P[,H:P...];
    '' is refused (it would mean the current directory)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must name a directory, not an empty string")
    if text.startswith("nats://"):
        from .store.jetstream.layout import parse_servers  # noqa: PLC0415 -- on use

        try:
            parse_servers(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _read_keys(args: argparse.Namespace) -> KeyTable | None:
    """The listener's keys: --keys-file, or --secret-file as one key that may do
    everything, or None.  A bad file is a UsageError naming its line."""
    from .protocol.keys import KeysFileError, KeyTable, load_keys_file  # noqa: PLC0415

    if args.keys_file is not None and args.secret_file is not None:
        raise UsageError("give --keys-file or --secret-file, not both")
    if args.keys_file is not None:
        try:
            return load_keys_file(args.keys_file)
        except KeysFileError as exc:
            raise UsageError(str(exc)) from None
    secret = read_secret(args.secret_file)
    if secret is None:
        return None
    try:
        return KeyTable.single(secret)
    except ValueError as exc:
        raise UsageError(f"--secret-file {args.secret_file!r}: {exc}") from None


def _require_store(path: str) -> Path | str:
    """A directory that is a purelink data directory (`streams/`, `purelink.lock`),
    or empty (a store with no streams yet); else a usage error naming it.  A
    nats:// URL is taken as it is (the cluster is asked when it is read)."""
    if path.startswith("nats://"):
        return path
    directory = Path(path)
    if not directory.is_dir():
        raise UsageError(f"--data {path!r} is not a directory")
    if not any((directory / name).exists() for name in ("streams", "purelink.lock")):
        try:
            empty = next(directory.iterdir(), None) is None
        except OSError as exc:
            raise UsageError(f"cannot read --data {path!r}: {exc.strerror}") from None
        if not empty:
            raise UsageError(
                f"--data {path!r} is not a purelink data directory "
                "(no streams/ folder or purelink.lock in it)"
            )
    return directory


# --- serve ---


def _cmd_serve(args: argparse.Namespace) -> int:
    from .listener import Listener  # noqa: PLC0415 -- see the imports

    if args.udp is None and args.tcp is None:
        raise UsageError("nothing to listen on: both --udp and --tcp are disabled")
    if args.metrics is not None:
        from . import metrics  # noqa: PLC0415 -- see the imports

        if not metrics.available():
            raise UsageError(f"--metrics needs prometheus-client: {metrics.INSTALL}")
    keys = _read_keys(args)
    if keys is None and not args.insecure:
        for flag, text in (("--udp", args.udp), ("--tcp", args.tcp)):
            if text is not None and not _address.is_loopback(_address.parse_hostport(text)[0]):
                raise UsageError(
                    f"refusing to listen on non-loopback {flag} {text} without --secret-file "
                    "or --keys-file (give --insecure to do it anyway)"
                )

    try:
        listener = Listener(
            args.data,
            udp=args.udp,
            tcp=args.tcp,
            sync=args.sync,
            keys=keys,
            segment_bytes=args.segment_bytes,
            retain_bytes=args.retain_bytes,
            retain_age=args.retain_age,
            max_links=args.max_links,
            max_streams=args.max_streams,
            max_record=args.max_record,
            max_reorder=args.max_reorder,
            max_memory=args.max_memory,
            handshake_rate=args.handshake_rate,
            handshake_burst=max(2.0 * args.handshake_rate, 1.0),
            max_connections=args.max_connections,
            read_timeout=args.read_timeout,
            max_subscriptions=args.max_subscriptions,
            insecure=args.insecure,
            replicas=args.replicas,
        )
    except ValueError as exc:  # e.g. a secret too short, a transport not offered
        raise UsageError(str(exc)) from None

    # Signals are turned into a byte on a pipe that the main thread blocks on.
    # Why not `threading.Event.set()` in the handler: a Python signal handler
    # runs in the main thread between bytecodes, possibly while that thread
    # holds the Event's (non-reentrant) lock inside `wait()` -- a deadlock.
    # A pipe write takes no lock, and a signal that arrives before the read
    # leaves its byte waiting, so no stop request is ever lost.
    wake_r, wake_w = os.pipe()
    crashed: BaseException | None = None

    def on_signal(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(OSError):  # full pipe: a stop is already pending
            os.write(wake_w, bytes([signum & 0xFF]))

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, on_signal) for sig in handled}
    exporter = None
    try:
        listener.start()
        if args.metrics is not None:  # up before the ready line, so it means both
            exporter = metrics.MetricsServer(listener, args.metrics)
            shown = format_address(exporter.address)
            logging.getLogger("purelink.serve").info("metrics at http://%s/metrics", shown)
        try:
            parts = [f"{PROG} listening"]
            if listener.udp_address is not None:
                parts.append(f"udp={format_address(listener.udp_address)}")
            if listener.tcp_address is not None:
                parts.append(f"tcp={format_address(listener.tcp_address)}")
            parts.append(f"data={args.data}")
            print(" ".join(parts), flush=True)
        except BrokenPipeError:
            silence_stdout()  # nobody reads the ready line; keep serving
        # blocks until SIGINT or SIGTERM, or until a thread of the listener died
        # (a bug; it is logged): then stop, and exit 1 rather than stay up deaf
        failure = listener._failure_fd()
        waiting = select.poll()  # not select(): with many streams open, fds pass 1023
        waiting.register(wake_r, select.POLLIN)
        waiting.register(failure, select.POLLIN)
        while True:
            ready = waiting.poll()  # PEP 475 retries it on EINTR
            if any(fd == failure for fd, _ in ready):
                crashed = listener.error
                break
            signums = os.read(wake_r, 64)
            if any(n != signal.SIGHUP for n in signums):
                break
            _reload(listener, args, keys is not None)
    finally:
        # Signals during close are swallowed by on_signal: close flushes and
        # syncs; SIGKILL remains for the impatient, and the store recovers.
        if exporter is not None:
            exporter.close()
        listener.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(wake_r)
        os.close(wake_w)
    stats = json.dumps(dataclasses.asdict(listener.stats()), default=str, sort_keys=True)
    sys.stderr.write(f"{PROG} serve: stopped {stats}\n")
    if crashed is not None:
        fail(f"serve: the listener stopped serving: {crashed!r}")
        return 1
    return 0


def _reload(listener: Listener, args: argparse.Namespace, keyed: bool) -> None:
    """SIGHUP: read the keys (or secret) file again and hand it to the listener; a
    bad file keeps the keys in use and says why, in one line."""
    if not keyed:
        sys.stderr.write(f"{PROG} serve: SIGHUP ignored: no --keys-file or --secret-file\n")
        return
    try:
        keys = _read_keys(args)
    except UsageError as exc:
        sys.stderr.write(f"{PROG} serve: reload failed, the keys in use stay: {exc}\n")
        return
    assert keys is not None
    listener.set_keys(keys)
    sys.stderr.write(f"{PROG} serve: keys reloaded ({len(keys)} keys)\n")


# --- read ---


def _cmd_read(args: argparse.Namespace) -> int:
    """Print records [--from, --to] of a stream; with --follow, keep going.

    An unknown stream reads as an empty one: no output, exit 0 (with --follow,
    wait for it to appear).  A stream comes into being with its first record,
    so "unknown" and "empty" are the same state, as `Store.first/last` = 0, 0 say.
    """
    from .store.follow import follow_records  # noqa: PLC0415 -- see the imports
    from .store.store import Store  # noqa: PLC0415

    if args.to is not None and args.start is not None and args.to < args.start:
        raise UsageError(f"--to {args.to} is before --from {args.start}")
    store = Store(str(_require_store(args.data)))
    stream = args.stream
    stop = None if args.to is None else args.to + 1  # Store.read's stop is exclusive
    out = sys.stdout.buffer
    write = out.write
    # Default start: the first record retained; with --follow on an empty (or
    # unknown) stream, the next record to come.
    start: int = args.start or store.first(stream) or (store.last(stream) + 1 if args.follow else 0)
    if not start:
        return 0
    if args.follow and isinstance(store, Store):  # inotify (store/follow.py), flushing
        records = follow_records(store, stream, start, stop, on_wait=out.flush)
    elif args.follow:  # a JetStream store: each record as it comes
        records = _flushing(store.read(stream, start=start, stop=stop, follow=True), out.flush)
    else:
        records = store.read(stream, start=start, stop=stop)
    _print_records(write, records, args.format)
    out.flush()
    return 0


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


# --- tail ---


def _cmd_tail(args: argparse.Namespace) -> int:
    """Print a stream's records read from a listener over TCP (subscribe.py):
    from --from (default: the first retained), and with --follow, for ever."""
    secret = client_secret(args)
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


# --- streams ---


def _cmd_streams(args: argparse.Namespace) -> int:
    from .store.store import Store  # noqa: PLC0415 -- see the imports

    directory = _require_store(args.data)
    store = Store(str(directory))
    infos = [store.stream_info(name) for name in store.streams()]
    rows = [(i.name, i.first, i.last, i.records, i.bytes) for i in infos]
    header = ("stream", "first", "last", "records", "bytes")
    cells = [header, *[(r[0], *(str(n) for n in r[1:])) for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        left = row[0].ljust(widths[0])
        right = "  ".join(cell.rjust(w) for cell, w in zip(row[1:], widths[1:], strict=True))
        print(f"{left}  {right}")
    return 0


# --- demo and bench ---


def _cmd_demo(args: argparse.Namespace) -> int:
    from ._demo import DemoError, DemoUsageError, run_demo  # noqa: PLC0415 -- see the imports

    try:
        return run_demo(records=args.records, size=args.size)
    except DemoUsageError as exc:
        raise UsageError(f"demo: {exc}") from None
    except DemoError as exc:
        fail(f"demo: {exc}")
        return 1


# --- the parser ---


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Ship records to durable storage and learn exactly which are stored.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    verbs = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def verb(name: str, help_text: str, func: Callable[[argparse.Namespace], int]) -> _Parser:
        sub: _Parser = verbs.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(func=func)
        return sub

    p = verb("serve", "run a listener until SIGINT/SIGTERM (SIGHUP reloads its keys)", _cmd_serve)
    p.add_argument(
        "--data",
        required=True,
        type=_data_dir,
        metavar="DIR|nats://H:P[,H:P...]",
        help="store directory, or a NATS JetStream cluster (docs/jetstream.md)",
    )
    p.add_argument(
        "--udp",
        type=_bind_address,
        default="127.0.0.1:7400",
        metavar="HOST:PORT",
        help="UDP address, port 0 = any free port, 'none' = no UDP (default 127.0.0.1:7400)",
    )
    p.add_argument("--no-udp", dest="udp", action="store_const", const=None, help="no UDP")
    p.add_argument("--tcp", type=_bind_address, metavar="HOST:PORT", help="TCP address")
    p.add_argument("--sync", choices=("batch", "always", "none"), default="batch")
    p.add_argument(
        "--secret-file", metavar="F", help="encrypt every datagram and frame under this secret"
    )
    p.add_argument(
        "--keys-file",
        metavar="F",
        help="keys and the streams each may use: 'ID BASE64-SECRET GLOB[,GLOB...]' per line; "
        "SIGHUP reloads it",
    )
    p.add_argument(
        "--insecure", action="store_true", help="allow a non-loopback address without a secret"
    )
    p.add_argument(
        "--metrics",
        type=_bind_address,
        metavar="HOST:PORT",
        help="serve Prometheus /metrics here (needs: pip install 'purelink[metrics]')",
    )
    p.add_argument(
        "--segment-bytes",
        type=_int_at_least(1, 1 << 40),
        default=64 << 20,
        metavar="N",
        help="roll to a new segment file past N bytes (default 64 MiB)",
    )
    p.add_argument(
        "--retain-bytes",
        type=_int_at_least(0, 1 << 62),
        metavar="N",
        help="remove the oldest segments of a stream past N bytes (default: keep all)",
    )
    p.add_argument(
        "--retain-age",
        type=_seconds,
        metavar="SECONDS",
        help="remove segments whose last record is older than this (default: keep all)",
    )
    # limits (docs/security.md): each one counted in stats().dropped when hit
    # (the upper bounds: what the wire carries -- a u32 max_record and window -- or
    # more than any machine has; past them a value is a typo, refused here)
    for flag, default, high, text in (
        ("--max-links", 100_000, 1 << 31, "most links open at once"),
        ("--max-streams", 10_000, 1 << 31, "most streams in the store"),
        ("--max-record", 16 << 20, 16 << 20, "largest record accepted, bytes, at most 16 MiB"),
        ("--max-reorder", 4 << 20, 1 << 31, "bytes held out of order per link"),
        ("--max-memory", 1 << 30, 1 << 50, "bytes held out of order across all links"),
        ("--max-connections", 10_000, 1 << 31, "TCP connections open at once"),
        ("--max-subscriptions", 64, 1 << 20, "subscribers (tail, subscribe) served at once"),
        ("--replicas", 3, 5, "with --data nats://: copies JetStream keeps of each stream"),
    ):
        p.add_argument(
            flag,
            type=_int_at_least(1, high),
            default=default,
            metavar="N",
            help=f"{text} ({default})",
        )
    p.add_argument(
        "--handshake-rate",
        type=_int_at_least(0, 10**9),
        default=1000,
        metavar="N",
        help="handshakes per second per source IP, bursts of 2N; 0 = no limit (1000)",
    )
    p.add_argument(
        "--read-timeout",
        type=_seconds,
        default=10.0,
        metavar="SECONDS",
        help="a TCP connection's time to finish a frame, or to open a session (10)",
    )

    p = verb("send", "send each line of stdin (or a file) as one record", cmd_send)
    p.add_argument("url", type=_url, metavar="URL", help="udp://HOST:PORT or tcp://HOST:PORT")
    p.add_argument("--stream", required=True, type=_stream, metavar="S")
    p.add_argument(
        "--producer",
        type=_producer,
        metavar="NAME",
        help="a named producer, same rule as a stream name (default: anonymous)",
    )
    p.add_argument("--file", metavar="F", help="read lines from F instead of stdin")
    p.add_argument("--secret-file", metavar="F", help="the secret (of the key --key-id names)")
    p.add_argument("--key-id", metavar="ID", help="the key's id in the listener's --keys-file")
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=10.0,
        metavar="SECONDS",
        help="give up (exit 1) after this long without an answer at connect, "
        "or without progress while records wait to be stored (10)",
    )
    p.add_argument(
        "--skip-long",
        action="store_true",
        help="skip (and count) lines over the listener's max_record instead of stopping",
    )

    p = verb("read", "print the records of a stream in order", _cmd_read)
    p.add_argument(
        "--data",
        required=True,
        type=_data_dir,
        metavar="DIR|nats://...",
        help="store directory, or a NATS JetStream cluster",
    )
    p.add_argument("--stream", required=True, type=_stream, metavar="S")
    _add_from(p)
    p.add_argument("--to", type=_int_at_least(1), metavar="M", help="last position (inclusive)")
    p.add_argument("--follow", action="store_true", help="keep printing new records")
    p.add_argument("--format", choices=("lines", "json"), default="lines")

    p = verb("tail", "print the records of a stream read from a listener over TCP", _cmd_tail)
    p.add_argument("url", type=_url, metavar="URL", help="the listener's tcp://HOST:PORT")
    p.add_argument("--stream", required=True, type=_stream, metavar="S")
    _add_from(p)
    p.add_argument("--follow", action="store_true", help="keep printing new records")
    p.add_argument("--format", choices=("lines", "json"), default="lines")
    p.add_argument("--secret-file", metavar="F", help="the secret (of the key --key-id names)")
    p.add_argument("--key-id", metavar="ID", help="the key's id in the listener's --keys-file")
    p.add_argument(
        "--timeout", type=_seconds, default=10.0, metavar="SECONDS", help="connect timeout"
    )
    p.add_argument(
        "--reconnect",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="if the connection breaks, resume where it stopped, trying for this long",
    )

    p = verb(
        "streams",
        "list the streams of a store: first and last position, records, and bytes "
        "on disk (segment files, batch headers included: more than send's payload bytes)",
        _cmd_streams,
    )
    p.add_argument(
        "--data",
        required=True,
        type=_data_dir,
        metavar="DIR|nats://...",
        help="store directory, or a NATS JetStream cluster",
    )

    p = verb("demo", "the main job in one command, with a summary", _cmd_demo)
    p.add_argument("--records", type=_int_at_least(1), default=1_000_000, metavar="N")
    p.add_argument(
        "--size", type=_int_at_least(8), default=61, metavar="B", help="bytes per record (>= 8)"
    )

    p = verb("bench", "run the benchmark suite (options after one NAME go to it)", cmd_bench)
    p.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: all)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    return parser


def _connect_error(text: str) -> str:
    """A ConnectError for people: a refusal says what it means (the listener was
    reached: it said no), anything else that the listener could not be reached."""
    from .protocol.messages import RefuseReason  # noqa: PLC0415 -- only on this error path

    _, refused, name = text.partition("the listener refused the link: ")
    if refused:
        meaning = RefuseReason.MEANINGS.get(name.strip())
        return f"{text} ({meaning})" if meaning else text
    if text.startswith(("cannot reach", "cannot subscribe")):
        return text
    return f"cannot reach the listener: {text}" if text else "cannot reach the listener"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (see the module docstring)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "bench":  # a benchmark's own options pass through
        args.options = extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    # The library logs (store recovery, reconnects) through `logging`; a
    # listener's INFO lines are worth seeing, a sender's are noise.
    logging.basicConfig(
        level=logging.INFO if args.command == "serve" else logging.WARNING,
        format="%(name)s: %(levelname)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        silence_stdout()
        return 0
    except UsageError as exc:
        fail(str(exc))
        return 2
    except ConnectError as exc:
        fail(_connect_error(str(exc)))
        return 1
    except Error as exc:
        kind = "" if type(exc) is Error else f"{type(exc).__name__}: "
        fail(f"{kind}{exc}")
        return 1
    except OSError as exc:
        fail(str(exc))
        return 1
