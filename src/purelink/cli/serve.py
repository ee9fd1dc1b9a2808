"""`purelink serve`: run a listener until SIGINT/SIGTERM; SIGHUP reloads its keys.

Why it exists: the verb that runs the product's server side.  It checks what
it can before binding (a transport, the metrics extra, a loopback address
without a secret), prints exactly one ready line once the listener is bound
and recovered (what scripts and tests wait for), turns signals into a byte
on a pipe that the main thread waits on, and on the way out closes the
listener (flush, sync) and logs one human line of what it did (its counters
ride along as the record's `stats` field: `--log-format json` shows them).
Everything it says after parsing goes through `logging`, formatted by logs.py
(`--log-format`, `--log-level`), each line starting with its UTC time.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import select
import signal
import textwrap
import time
from typing import TYPE_CHECKING

from .. import Error, _address
from ..listener.limits import INTEGER_LIMITS, LIMITS
from . import logs
from .args import (
    DURATION_HELP,
    SIZE_HELP,
    bind_address,
    data_dir,
    int_at_least,
    seconds,
    size,
    size_at_least,
)
from .common import (
    PROG,
    UsageError,
    format_address,
    read_secret,
    signals_to_pipe,
    silence_stdout,
)

if TYPE_CHECKING:
    from ..listener.listener import Listener
    from ..metrics_http import MetricsServer
    from ..protocol.keys import KeyTable

__all__ = ["add_serve_arguments", "cmd_serve", "read_keys"]

log = logging.getLogger("purelink.serve")


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    """serve's options (README: Command line; the limits: docs/security.md).
    Each can also come from the environment or a --config file (config.py)."""
    config = (
        "Every option can also be set in the environment, PURELINK_ + its name in capitals "
        "with - as _ (PURELINK_RETAIN_BYTES=1G), or in the TOML file --config names "
        '(retain-bytes = "1G"); a flag wins over the environment, the environment over '
        f"the file. {SIZE_HELP[0].upper()}{SIZE_HELP[1:]}; {DURATION_HELP}."
    )
    p.epilog = "\n".join([*textwrap.wrap(config, 78), "", p.epilog or ""]).rstrip()
    p.add_argument(
        "--config",
        metavar="FILE",
        help="read options from this TOML file, its keys the options' names (docs/deploy.md)",
    )
    _add_addresses(p)
    _add_security(p)
    _add_store(p)
    _add_limits(p)
    _add_logs(p)


def _add_addresses(p: argparse.ArgumentParser) -> None:
    """Where the streams go, and what the listener binds."""
    p.add_argument(
        "--data",
        required=True,
        type=data_dir,
        metavar="DIR|nats://H:P[,H:P...]",
        help="store directory, or a NATS JetStream cluster (docs/jetstream.md)",
    )
    p.add_argument(
        "--udp",
        type=bind_address,
        default="127.0.0.1:7400",
        metavar="HOST:PORT",
        help="UDP address, port 0 = any free port, 'none' = no UDP (default 127.0.0.1:7400)",
    )
    p.add_argument("--no-udp", dest="udp", action="store_const", const=None, help="no UDP")
    p.add_argument("--tcp", type=bind_address, metavar="HOST:PORT", help="TCP address")
    p.add_argument(
        "--metrics",
        type=bind_address,
        metavar="HOST:PORT",
        help="serve Prometheus /metrics here (needs: pip install 'purelink[metrics]')",
    )


def _add_security(p: argparse.ArgumentParser) -> None:
    """The keys (docs/security.md), and leave to go without them."""
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


def _add_store(p: argparse.ArgumentParser) -> None:
    """How a data directory is written: syncs, segments, retention."""
    p.add_argument(
        "--sync",
        choices=("batch", "always", "none"),
        default="batch",
        help="when a record counts as stored: batch = after the fsync of each drain's "
        "writes (default), always = an fsync per batch, none = once written (no fsync: "
        "a power cut may lose what was told stored)",
    )
    p.add_argument(
        "--min-free",
        type=_min_free,
        default="1%",
        metavar="SIZE|P%",
        help="keep this much free on the data directory's file systems: below it a "
        "stream there stores nothing more (its links wait) until there is room (default 1%%)",
    )
    p.add_argument(
        "--segment-bytes",
        type=size_at_least(*INTEGER_LIMITS["segment_bytes"]),
        default=64 << 20,
        metavar="SIZE",
        help="roll to a new segment file past this size (default 64M)",
    )
    p.add_argument(
        "--retain-bytes",
        type=size_at_least(*INTEGER_LIMITS["retain_bytes"]),
        metavar="SIZE",
        help="remove the oldest segments of a stream past this size, e.g. 10G (default: keep all)",
    )
    p.add_argument(
        "--retain-age",
        type=seconds,
        metavar="DURATION",
        help="remove segments whose last record is older than this, e.g. 7d (default: keep all)",
    )


_SIZES = {"--max-record": "16M", "--max-reorder": "4M", "--max-memory": "1G"}
"""The limits that are sizes, and their defaults as --help shows them."""


def _add_limits(p: argparse.ArgumentParser) -> None:
    """The limits (docs/security.md), each one counted in stats().dropped when
    hit.  Their bounds are Listener's own (listener/limits.py: what the wire
    carries -- a u32 max_record and window -- or more than any machine has;
    past them a value is a typo, refused here)."""
    for flag, default, text in (
        ("--max-links", 100_000, "most links open at once"),
        ("--max-streams", 10_000, "most streams in the store"),
        ("--max-record", 16 << 20, "largest record accepted, at most 16M"),
        ("--max-reorder", 4 << 20, "bytes held out of order per link"),
        ("--max-memory", 1 << 30, "bytes held out of order across all links"),
        ("--max-connections", 10_000, "TCP connections open at once"),
        ("--max-subscriptions", 64, "subscribers (tail, subscribe) served at once"),
        ("--replicas", 3, "with --data nats://: copies JetStream keeps of each stream"),
    ):
        low, high = INTEGER_LIMITS[flag.removeprefix("--").replace("-", "_")]
        is_size = flag in _SIZES
        p.add_argument(
            flag,
            type=(size_at_least if is_size else int_at_least)(low, high),
            default=default,
            metavar="SIZE" if is_size else "N",
            help=f"{text} ({_SIZES.get(flag, default)})",
        )
    rate = LIMITS["handshake_rate"]
    p.add_argument(
        "--handshake-rate",
        type=int_at_least(int(rate.low), int(rate.high)),
        default=1000,
        metavar="N",
        help="handshakes per second per source IP, bursts of 2N; 0 = no limit (1000)",
    )
    p.add_argument(
        "--read-timeout",
        type=seconds,
        default=10.0,
        metavar="DURATION",
        help="a TCP connection's time to finish a frame, or to open a session (10s)",
    )


def _add_logs(p: argparse.ArgumentParser) -> None:
    """serve's own log lines on stderr (logs.py; docs/logging.md)."""
    p.add_argument(
        "--log-format",
        type=str.lower,
        choices=logs.FORMATS,
        default="text",
        help="stderr lines as 'TIME LEVEL LOGGER: MESSAGE', or one JSON object each (text)",
    )
    p.add_argument(
        "--log-level",
        type=str.lower,
        choices=logs.LEVELS,
        default="info",
        help="log from this level up (info)",
    )


def cmd_serve(args: argparse.Namespace) -> int:
    started = time.monotonic()
    logs.configure(args.log_format, args.log_level)
    keys = _check(args)
    listener = _listener(args, keys)
    crashed: BaseException | None = None
    # a signal becomes a byte on a pipe, whichever thread it lands on (common.py);
    # signals during close are swallowed: close flushes and syncs, SIGKILL remains
    # for the impatient, and the store recovers
    with signals_to_pipe(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as wake_r:
        exporter = None
        try:
            listener.start()
            if args.metrics is not None:  # up before the ready line, so it means both
                exporter = _export_metrics(listener, args.metrics)
            _say_ready(listener, args)
            crashed = _serve_until_stopped(listener, args, wake_r, keyed=keys is not None)
        finally:
            if exporter is not None:
                exporter.close()
            listener.close()
    if crashed is not None:
        log.error("the listener stopped serving: %r", crashed)
    stats = listener.stats()
    log.info(
        "%s",
        logs.stop_summary(stats, time.monotonic() - started),
        extra={"stats": dataclasses.asdict(stats)},
    )
    return 0 if crashed is None else 1


def _check(args: argparse.Namespace) -> KeyTable | None:
    """What can be refused before anything is bound: nothing to listen on, the
    metrics extra missing, a non-loopback address without keys.  Returns the keys."""
    if args.udp is None and args.tcp is None:
        raise UsageError("nothing to listen on: both --udp and --tcp are disabled")
    if args.metrics is not None:
        from .. import metrics  # noqa: PLC0415 -- see the imports

        if not metrics.available():
            raise Error(f"--metrics needs prometheus-client: {metrics.INSTALL}")
    keys = read_keys(args)
    if keys is None and not args.insecure:
        for flag, text in (("--udp", args.udp), ("--tcp", args.tcp)):
            if text is not None and not _address.is_loopback(_address.parse_hostport(text)[0]):
                raise UsageError(
                    f"refusing to listen on non-loopback {flag} {text} without --secret-file "
                    "or --keys-file (give --insecure to do it anyway)"
                )
    return keys


def _min_free(text: str) -> int | str:
    """--min-free: a size (bytes) or P% (checked as the listener will)."""
    from ..listener.config import parse_min_free  # noqa: PLC0415 -- see the imports

    value: int | str = text if text.strip().endswith("%") else size(text)
    try:
        parse_min_free(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("min_free", "--min-free")) from None
    return value


def _listener(args: argparse.Namespace, keys: KeyTable | None) -> Listener:
    """The listener the options describe (not started yet)."""
    from ..listener.listener import Listener  # noqa: PLC0415 -- see the imports

    try:
        return Listener(
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
            min_free=args.min_free,
        )
    except ValueError as exc:  # e.g. a secret too short, a transport not offered
        raise UsageError(str(exc)) from None


def _export_metrics(listener: Listener, address: str) -> MetricsServer:
    from ..metrics_http import MetricsServer  # noqa: PLC0415 -- see the imports

    exporter = MetricsServer(listener, address)
    log.info("metrics at http://%s/metrics", format_address(exporter.address))
    return exporter


def _say_ready(listener: Listener, args: argparse.Namespace) -> None:
    """The one ready line: the listener is bound and its store recovered."""
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


def _serve_until_stopped(
    listener: Listener, args: argparse.Namespace, wake_r: int, *, keyed: bool
) -> BaseException | None:
    """Block until SIGINT or SIGTERM (None), or until a thread of the listener
    died (a bug; it is logged): then its error, so that serve stops and exits 1
    rather than stay up deaf.  SIGHUP reloads the keys and serving goes on."""
    from ..listener.listener import failure_fd  # noqa: PLC0415 -- see the imports

    failure = failure_fd(listener)
    waiting = select.poll()  # not select(): with many streams open, fds pass 1023
    waiting.register(wake_r, select.POLLIN)
    waiting.register(failure, select.POLLIN)
    while True:
        ready = waiting.poll()  # PEP 475 retries it on EINTR
        if any(fd == failure for fd, _ in ready):
            return listener.error
        signums = os.read(wake_r, 64)
        if any(n != signal.SIGHUP for n in signums):
            return None
        _reload(listener, args, keyed)


def _reload(listener: Listener, args: argparse.Namespace, keyed: bool) -> None:
    """SIGHUP: read the keys (or secret) file again and hand it to the listener
    (which logs the reload, once); a bad file keeps the keys in use and says why,
    in one line."""
    from ..listener.listener import key_reload_failed  # noqa: PLC0415 -- see the imports

    if not keyed:
        log.warning("SIGHUP ignored: no --keys-file or --secret-file")
        return
    try:
        keys = read_keys(args)
    except UsageError as exc:
        key_reload_failed(listener)  # purelink_key_reload_failures_total
        log.error("reload failed, the keys in use stay: %s", exc)
        return
    assert keys is not None
    if not listener.set_keys(keys):
        log.warning("the new keys are not in use yet after 5 s: the listener's loop is late")


def read_keys(args: argparse.Namespace) -> KeyTable | None:
    """The listener's keys: --keys-file, or --secret-file as one key that may do
    everything, or None.  A bad file is a UsageError naming its line."""
    from ..protocol.keys import KeysFileError, KeyTable, load_keys_file  # noqa: PLC0415

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
