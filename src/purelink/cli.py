"""The `purelink` command: serve, send, read, tail, streams, demo, bench (SPEC section 4).

Why it exists: the command line is the product's public face for people who
do not write Python against it, and for the one-command demo of SPEC section
10.  It is a thin shell over the public API of SPEC section 3; it holds no
protocol or storage logic of its own.

Exit codes, for every verb (SPEC section 4):

* 0   success;
* 1   the operation failed: an unreachable listener (`ConnectError`), any other
      `purelink.Error`, an OS error such as an address in use, a demo whose
      read-back differs;
* 2   bad arguments: argparse errors, a malformed address or stream name, a
      missing file, a refused non-loopback bind;
* 130 interrupted by SIGINT (Ctrl-C), quietly.

Every failure is ONE line on stderr, `purelink: error: ...`, never a usage dump
and never a traceback.  A closed stdout (`purelink read ... | head`) exits 0
quietly.
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
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING, NoReturn

from . import ConnectError, Error, Full, Link, __version__, _address, connect, subscribe
from ._progress import Progress
from .protocol.names import validate_stream_name

if TYPE_CHECKING:
    from .listener import Listener
    from .protocol.keys import KeyTable

# The listener, the store and the demo are imported by the verbs that use them:
# `purelink send` is what a shell script runs once per job, and should not pay
# for importing them (docs/performance.md, "short-lived processes").

__all__ = ["main"]

PROG = "purelink"


class UsageError(Exception):
    """A bad argument found after parsing (a missing file, a refused bind): exit 2."""


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit code 2.

    argparse's own `error` prints the whole usage block first; SPEC section 4
    wants one line.  Sub-parsers inherit this class (argparse creates them with
    `type(parent)`), so every verb behaves the same.
    """

    def error(self, message: str) -> NoReturn:
        _fail(message)
        raise SystemExit(2)


def _fail(message: str) -> None:
    """Write the one error line: newlines in `message` are folded into spaces."""
    one_line = " ".join(str(message).split())
    sys.stderr.write(f"{PROG}: error: {one_line}\n")
    sys.stderr.flush()


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
    """A stream name by the store's own rule (SPEC section 1)."""
    try:
        return validate_stream_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_from(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--from",
        dest="start",
        type=_int_at_least(1),
        metavar="N",
        help="first position (default: the first record retained)",
    )


def _int_at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}: {text!r}")
        return value

    parse.__name__ = "integer"
    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 seconds: {text!r}")
    return value


# --- helpers shared by the verbs ---


def _read_secret(path: str | None) -> bytes | None:
    """The file's bytes less one trailing newline (so `echo s > f` works); None if no file."""
    if path is None:
        return None
    try:
        secret = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read --secret-file {path!r}: {exc.strerror}") from None
    if secret.endswith(b"\n"):
        secret = secret[:-1].removesuffix(b"\r")
    if not secret:
        raise UsageError(f"--secret-file {path!r} is empty")
    return secret


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
    secret = _read_secret(args.secret_file)
    if secret is None:
        return None
    try:
        return KeyTable.single(secret)
    except ValueError as exc:
        raise UsageError(f"--secret-file {args.secret_file!r}: {exc}") from None


def _client_secret(args: argparse.Namespace) -> bytes | None:
    """A client's secret (--secret-file), checked against --key-id."""
    secret = _read_secret(args.secret_file)
    if args.key_id is not None and secret is None:
        raise UsageError("--key-id needs --secret-file (the key's secret)")
    return secret


def _format_address(address: tuple[str, int]) -> str:
    return _address.format_hostport(address[0], address[1])


def _require_dir(path: str) -> Path:
    directory = Path(path)
    if not directory.is_dir():
        raise UsageError(f"--data {path!r} is not a directory")
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
            shown = _format_address(exporter.address)
            logging.getLogger("purelink.serve").info("metrics at http://%s/metrics", shown)
        try:
            parts = [f"{PROG} listening"]
            if listener.udp_address is not None:
                parts.append(f"udp={_format_address(listener.udp_address)}")
            if listener.tcp_address is not None:
                parts.append(f"tcp={_format_address(listener.tcp_address)}")
            parts.append(f"data={args.data}")
            print(" ".join(parts), flush=True)
        except BrokenPipeError:
            _silence_stdout()  # nobody reads the ready line; keep serving
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
        _fail(f"serve: the listener stopped serving: {crashed!r}")
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


# --- send ---


def _open_input(path: str | None) -> IO[bytes]:
    if path is None:
        return sys.stdin.buffer
    try:
        return open(path, "rb")  # closed by _cmd_send
    except OSError as exc:
        raise UsageError(f"cannot read --file {path!r}: {exc.strerror}") from None


def _cmd_send(args: argparse.Namespace) -> int:
    """Queue each input line (less its b"\\n"; a b"\\r" stays payload) as one record."""
    secret = _client_secret(args)
    source = _open_input(args.file)  # before connecting: a missing file is a usage error
    try:
        try:
            link = connect(
                args.url,
                stream=args.stream,
                producer=args.producer,
                timeout=args.timeout,
                secret=secret,
                key_id=args.key_id,
            )
        except ValueError as exc:  # the link refused an argument (e.g. a producer name)
            raise UsageError(str(exc)) from None
        started = time.perf_counter()
        try:
            count, size = _send_lines(link, source)
        except BaseException:
            link.close(timeout=0)  # interrupted or failed: do not wait for the rest
            raise
        all_stored = link.close()
    finally:
        if source is not sys.stdin.buffer:
            source.close()
    seconds = time.perf_counter() - started
    if not all_stored:
        raise Error(f"only {link.stored:,} of {link.queued:,} records were stored")
    rate = count / seconds if seconds > 0 else 0.0
    sys.stderr.write(
        f"{PROG} send: {count:,} record{'' if count == 1 else 's'}, {size:,} bytes stored "
        f"in {seconds:.3f} s "
        f"({rate:,.0f} records/s)\n"
    )
    return 0


def _send_lines(link: Link, source: IO[bytes]) -> tuple[int, int]:
    """Queue every line, never dropping one; return (records, bytes) once all are stored."""
    progress = Progress(f"{PROG} send", None)
    queue = link.queue
    count = size = 0
    for line in source:
        record = line[:-1] if line.endswith(b"\n") else line
        while True:
            try:
                queue(record)
                break
            except Full:
                # Never drop: wait for the oldest unstored record, then retry.
                link.wait_stored(link.stored + 1, timeout=0.1)
                progress.update(count, f"stored {link.stored:,} (capacity full)")
        count += 1
        size += len(record)
        if count & 1023 == 0:
            progress.update(count, f"stored {link.stored:,}")
    while not link.wait_stored(timeout=0.1):
        progress.update(count, f"stored {link.stored:,}")
    progress.close(count, f"stored {link.stored:,}")
    return count, size


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
    store = Store(str(_require_dir(args.data)))
    stream = args.stream
    stop = None if args.to is None else args.to + 1  # Store.read's stop is exclusive
    out = sys.stdout.buffer
    write = out.write
    # Default start: the first record retained; with --follow on an empty (or
    # unknown) stream, the next record to come.
    start: int = args.start or store.first(stream) or (store.last(stream) + 1 if args.follow else 0)
    if not start:
        return 0
    if args.follow:  # waits with inotify (store/follow.py); flushes before each wait
        records = follow_records(store, stream, start, stop, on_wait=out.flush)
    else:
        records = store.read(stream, start=start, stop=stop)
    _print_records(write, records, args.format)
    out.flush()
    return 0


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
    secret = _client_secret(args)
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

    directory = _require_dir(args.data)
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
    from ._demo import DemoError, run_demo  # noqa: PLC0415 -- see the imports

    try:
        return run_demo(records=args.records, size=args.size)
    except DemoError as exc:
        _fail(f"demo: {exc}")
        return 1


def _cmd_bench(args: argparse.Namespace) -> int:
    """Hand over to the benchmark suite (SPEC section 8).

    The suite is `purelink.bench` if it ships in the package, else the
    `bench/` package of the checkout this module runs from (an editable
    install); either exposes `main(argv: list[str]) -> int`.
    """
    import importlib  # noqa: PLC0415 -- only this verb needs it

    argv = [*args.names, *(["--json"] if args.json else [])]
    checkout = Path(__file__).resolve().parents[2]
    for name in ("purelink.bench", "bench"):
        if name == "bench":
            if not (checkout / "bench" / "__init__.py").is_file():
                continue
            sys.path.insert(0, str(checkout))
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise Error(f"the benchmarks need {exc.name!r}: pip install '.[bench]'") from None
        bench_main = getattr(module, "main", None)
        if callable(bench_main):
            return int(bench_main(argv))
    raise UsageError(
        "the benchmarks are not installed: they live in bench/ of a source checkout "
        "(pip install -e . there, or run python -m bench from it)"
    )


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

    p = verb("serve", "run a listener until SIGINT/SIGTERM", _cmd_serve)
    p.add_argument("--data", required=True, metavar="DIR", help="store directory")
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
        type=_int_at_least(1),
        default=64 << 20,
        metavar="N",
        help="roll to a new segment file past N bytes (default 64 MiB)",
    )
    p.add_argument(
        "--retain-bytes",
        type=_int_at_least(0),
        metavar="N",
        help="remove the oldest segments of a stream past N bytes (default: keep all)",
    )
    p.add_argument(
        "--retain-age",
        type=_seconds,
        metavar="SECONDS",
        help="remove segments whose last record is older than this (default: keep all)",
    )
    # limits (SPEC section 7; docs/security.md): each one counted in stats().dropped when hit
    for flag, default, text in (
        ("--max-links", 100_000, "most links open at once"),
        ("--max-streams", 10_000, "most streams in the store"),
        ("--max-record", 16 << 20, "largest record accepted, bytes"),
        ("--max-reorder", 4 << 20, "bytes held out of order per link"),
        ("--max-memory", 1 << 30, "bytes held out of order across all links"),
        ("--max-connections", 10_000, "TCP connections open at once"),
    ):
        p.add_argument(
            flag, type=_int_at_least(1), default=default, metavar="N", help=f"{text} ({default})"
        )
    p.add_argument(
        "--handshake-rate",
        type=_int_at_least(0),
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

    p = verb("send", "send each line of stdin (or a file) as one record", _cmd_send)
    p.add_argument("url", type=_url, metavar="URL", help="udp://HOST:PORT or tcp://HOST:PORT")
    p.add_argument("--stream", required=True, type=_stream, metavar="S")
    p.add_argument("--producer", metavar="NAME", help="a named producer (default: anonymous)")
    p.add_argument("--file", metavar="F", help="read lines from F instead of stdin")
    p.add_argument("--secret-file", metavar="F", help="the secret (of the key --key-id names)")
    p.add_argument("--key-id", metavar="ID", help="the key's id in the listener's --keys-file")
    p.add_argument(
        "--timeout", type=_seconds, default=10.0, metavar="SECONDS", help="handshake timeout"
    )

    p = verb("read", "print the records of a stream in order", _cmd_read)
    p.add_argument("--data", required=True, metavar="DIR", help="store directory")
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

    p = verb("streams", "list the streams of a store", _cmd_streams)
    p.add_argument("--data", required=True, metavar="DIR", help="store directory")

    p = verb("demo", "the main job in one command, with a summary", _cmd_demo)
    p.add_argument("--records", type=_int_at_least(1), default=1_000_000, metavar="N")
    p.add_argument(
        "--size", type=_int_at_least(8), default=61, metavar="B", help="bytes per record (>= 8)"
    )

    p = verb("bench", "run the benchmark suite", _cmd_bench)
    p.add_argument("names", nargs="*", metavar="NAME")
    p.add_argument("--json", action="store_true")
    return parser


def _silence_stdout() -> None:
    """After EPIPE, point fd 1 at /dev/null so the interpreter's final flush is quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (see the module docstring)."""
    args = build_parser().parse_args(argv)
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
        _silence_stdout()
        return 0
    except UsageError as exc:
        _fail(str(exc))
        return 2
    except ConnectError as exc:
        _fail(f"cannot reach the listener: {exc}" if str(exc) else "cannot reach the listener")
        return 1
    except Error as exc:
        kind = "" if type(exc) is Error else f"{type(exc).__name__}: "
        _fail(f"{kind}{exc}")
        return 1
    except OSError as exc:
        _fail(str(exc))
        return 1
