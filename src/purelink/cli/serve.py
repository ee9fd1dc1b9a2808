"""`purelink serve`: run a listener until SIGINT/SIGTERM; SIGHUP reloads its keys.

Why it exists: the verb that runs the product's server side.  It checks what
it can before binding (a transport, the metrics extra, a loopback address
without a secret), prints exactly one ready line once the listener is bound
and recovered (what scripts and tests wait for), turns signals into a byte
on a pipe that the main thread waits on, and on the way out closes the
listener (flush, sync) and prints its counters as one JSON line on stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import select
import signal
import sys
from typing import TYPE_CHECKING

from .. import Error, _address
from ..listener.limits import INTEGER_LIMITS, LIMITS
from .args import bind_address, data_dir, int_at_least, seconds
from .common import (
    PROG,
    UsageError,
    fail,
    format_address,
    read_secret,
    signals_to_pipe,
    silence_stdout,
)

if TYPE_CHECKING:
    from ..listener.listener import Listener
    from ..metrics import MetricsServer
    from ..protocol.keys import KeyTable

__all__ = ["add_serve_arguments", "cmd_serve", "read_keys"]


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    """serve's options (README: Command line; the limits: docs/security.md)."""
    _add_addresses(p)
    _add_security(p)
    _add_store(p)
    _add_limits(p)


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
        metavar="BYTES|P%",
        help="keep this much free on the data directory's file systems: below it a "
        "stream there stores nothing more (its links wait) until there is room (default 1%%)",
    )
    p.add_argument(
        "--segment-bytes",
        type=int_at_least(*INTEGER_LIMITS["segment_bytes"]),
        default=64 << 20,
        metavar="N",
        help="roll to a new segment file past N bytes (default 64 MiB)",
    )
    p.add_argument(
        "--retain-bytes",
        type=int_at_least(*INTEGER_LIMITS["retain_bytes"]),
        metavar="N",
        help="remove the oldest segments of a stream past N bytes (default: keep all)",
    )
    p.add_argument(
        "--retain-age",
        type=seconds,
        metavar="SECONDS",
        help="remove segments whose last record is older than this (default: keep all)",
    )


def _add_limits(p: argparse.ArgumentParser) -> None:
    """The limits (docs/security.md), each one counted in stats().dropped when
    hit.  Their bounds are Listener's own (listener/limits.py: what the wire
    carries -- a u32 max_record and window -- or more than any machine has;
    past them a value is a typo, refused here)."""
    for flag, default, text in (
        ("--max-links", 100_000, "most links open at once"),
        ("--max-streams", 10_000, "most streams in the store"),
        ("--max-record", 16 << 20, "largest record accepted, bytes, at most 16 MiB"),
        ("--max-reorder", 4 << 20, "bytes held out of order per link"),
        ("--max-memory", 1 << 30, "bytes held out of order across all links"),
        ("--max-connections", 10_000, "TCP connections open at once"),
        ("--max-subscriptions", 64, "subscribers (tail, subscribe) served at once"),
        ("--replicas", 3, "with --data nats://: copies JetStream keeps of each stream"),
    ):
        low, high = INTEGER_LIMITS[flag.removeprefix("--").replace("-", "_")]
        p.add_argument(
            flag,
            type=int_at_least(low, high),
            default=default,
            metavar="N",
            help=f"{text} ({default})",
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
        metavar="SECONDS",
        help="a TCP connection's time to finish a frame, or to open a session (10)",
    )


def cmd_serve(args: argparse.Namespace) -> int:
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
    stats = json.dumps(dataclasses.asdict(listener.stats()), default=str, sort_keys=True)
    sys.stderr.write(f"{PROG} serve: stopped {stats}\n")
    if crashed is not None:
        fail(f"the listener stopped serving: {crashed!r}", f"{PROG} serve")
        return 1
    return 0


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


def _min_free(text: str) -> str:
    """--min-free: BYTES or P% (checked as the listener will)."""
    from ..listener.config import parse_min_free  # noqa: PLC0415 -- see the imports

    try:
        parse_min_free(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).replace("min_free", "--min-free")) from None
    return text


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
    from ..metrics import MetricsServer  # noqa: PLC0415 -- see the imports

    exporter = MetricsServer(listener, address)
    shown = format_address(exporter.address)
    logging.getLogger("purelink.serve").info("metrics at http://%s/metrics", shown)
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
    """SIGHUP: read the keys (or secret) file again and hand it to the listener; a
    bad file keeps the keys in use and says why, in one line."""
    if not keyed:
        sys.stderr.write(f"{PROG} serve: SIGHUP ignored: no --keys-file or --secret-file\n")
        return
    try:
        keys = read_keys(args)
    except UsageError as exc:
        sys.stderr.write(f"{PROG} serve: reload failed, the keys in use stay: {exc}\n")
        return
    assert keys is not None
    listener.set_keys(keys)
    sys.stderr.write(f"{PROG} serve: keys reloaded ({len(keys)} keys)\n")


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
