"""The `purelink` command: serve, send, read, tail, streams, demo, bench (README: Command line).

Why it exists: the command line is the product's public face for people who
do not write Python against it, and for the one-command demo.  It is a thin
shell over the public API (the README's Python API); it holds no protocol or
storage logic of its own.

Exit codes, for every verb (the README's command line):

* 0   success;
* 1   the operation failed: an unreachable listener (`ConnectError`), any other
      `purelink.Error`, an OS error such as an address in use, a demo whose
      read-back differs, a missing optional package (nats-py, prometheus-client),
      a stream that does not exist with `--must-exist`;
* 2   bad arguments: argparse errors, a malformed address, stream or producer
      name, a number out of range, a missing file, a refused non-loopback bind,
      a --data that is empty or not a store; and `purelink` with no command
      (it prints the commands and examples on stderr);
* 130 interrupted by SIGINT (Ctrl-C), quietly -- `send` says what was stored;
      a demo stopped by SIGTERM or SIGHUP exits 143 or 129, cleaned up.

Every failure is ONE line on stderr, `purelink VERB: error: what went wrong:
why` (common.fail), never a usage dump and never a traceback.  A closed
stdout (`purelink read ... | head`) exits 0 quietly.  This module holds the
parser, `demo` and the exit codes; each other verb lives in a module of its
own with its options: serve.py, send.py, read.py (read, tail, streams),
bench.py; the argument types they share are in args.py.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from .. import ConnectError, Error, __version__
from ..errors import os_reason
from .args import int_at_least, size_at_least
from .bench import bench_list, cmd_bench
from .common import (
    PROG,
    UsageError,
    fail,
    silence_stdout,
)
from .config import with_config
from .examples import EXAMPLES, OVERVIEW
from .read import (
    add_read_arguments,
    add_streams_arguments,
    add_tail_arguments,
    cmd_read,
    cmd_streams,
    cmd_tail,
)
from .send import add_send_arguments, cmd_send
from .serve import add_serve_arguments, cmd_serve

# The listener, the store and the demo are imported by the verbs that use them:
# `purelink send` is what a shell script runs once per job, and should not pay
# for importing them (docs/performance.md, "short-lived processes").

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit code 2.

    argparse's own `error` prints the whole usage block first; the README's command line
    wants one line.  Sub-parsers inherit this class (argparse creates them with
    `type(parent)`), so every verb behaves the same.  `more_help`, when set, adds
    lines to the help that are costly to know (bench's list loads the suite).
    """

    more_help: Callable[[], str] | None = None

    def format_help(self) -> str:
        text = super().format_help()
        return text if self.more_help is None else f"{text}\n{self.more_help()}\n"

    def error(self, message: str) -> NoReturn:
        fail(message, self.prog)
        raise SystemExit(2)

    def actions(self) -> list[argparse.Action]:
        """Every argument the parser takes, as argparse holds it (config.py walks them)."""
        return list(self._actions)


# --- demo and bench ---


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import DemoError, DemoUsageError, run_demo  # noqa: PLC0415 -- see the imports

    try:
        return run_demo(records=args.records, size=args.size)
    except DemoUsageError as exc:
        raise UsageError(str(exc)) from None
    except DemoError as exc:
        fail(str(exc), f"{PROG} demo")
        return 1


# --- the parser ---


def build_parser() -> _Parser:
    parser = _Parser(
        prog=PROG,
        description="Ship records to durable storage and learn exactly which are stored.",
        epilog=OVERVIEW,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    verbs = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def verb(name: str, help_text: str, func: Callable[[argparse.Namespace], int]) -> _Parser:
        sub: _Parser = verbs.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=EXAMPLES[name],
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.set_defaults(func=func)
        return sub

    add_serve_arguments(
        verb("serve", "run a listener until SIGINT/SIGTERM (SIGHUP reloads its keys)", cmd_serve)
    )
    add_send_arguments(verb("send", "send each line of stdin (or a file) as one record", cmd_send))
    add_read_arguments(verb("read", "print the records of a stream in order", cmd_read))
    add_tail_arguments(
        verb("tail", "print the records of a stream read from a listener over TCP", cmd_tail)
    )
    p = verb(
        "streams",
        "list the streams of a store, or of a listener over TCP: first and last position, "
        "records, and bytes on disk (segment files, batch headers included: more than "
        "send's payload bytes)",
        cmd_streams,
    )
    add_streams_arguments(p)

    p = verb("demo", "the main job in one command, with a summary", _cmd_demo)
    p.add_argument(
        "--records",
        type=int_at_least(1),
        default=1_000_000,
        metavar="N",
        help="records to send (default 1,000,000)",
    )
    p.add_argument(
        "--size", type=size_at_least(8), default=61, metavar="B", help="bytes per record (>= 8)"
    )

    p = verb("bench", "run the benchmark suite (options after one NAME go to it)", cmd_bench)
    p.more_help = bench_list
    p.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: all)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    return parser


def _connect_error(text: str) -> str:
    """A ConnectError for people: a refusal says what it means (the listener was
    reached: it said no), anything else that the listener could not be reached."""
    from ..protocol.messages import RefuseReason  # noqa: PLC0415 -- only on this error path

    _, refused, name = text.partition("the listener refused the link: ")
    if refused:
        meaning = RefuseReason.MEANINGS.get(name.strip())
        return f"{text} ({meaning})" if meaning else text
    if text.startswith(("cannot reach the listener", "cannot reach NATS", "cannot subscribe")):
        return text
    if text.startswith("cannot reach "):  # the link's own: "cannot reach URL: why"
        return f"cannot reach the listener at {text.removeprefix('cannot reach ')}"
    if text.startswith(("udp://", "tcp://")):  # "URL: why"
        return f"cannot reach the listener at {text}"
    return f"cannot reach the listener: {text}" if text else "cannot reach the listener"


def _verb(parser: _Parser, name: str) -> _Parser:
    """The sub-parser of the verb `name` (argparse makes it of the parser's class)."""
    for action in parser.actions():
        if isinstance(action, argparse._SubParsersAction):
            sub = action.choices[name]
            assert isinstance(sub, _Parser)
            return sub
    raise LookupError(name)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code (see the module docstring)."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:  # `purelink` alone: what it can do
        sys.stderr.write(parser.format_help())
        return 2
    if argv[:1] == ["serve"]:  # its options from the environment and --config too
        try:
            argv[1:] = with_config(_verb(parser, "serve").actions(), argv[1:], os.environ)
        except UsageError as exc:
            fail(str(exc), f"{PROG} serve")
            return 2
    args, extra = parser.parse_known_args(argv)
    if args.command == "bench":  # a benchmark's own options pass through
        args.options = extra
    elif extra:
        fail(f"unrecognized arguments: {' '.join(extra)}", f"{PROG} {args.command}")
        return 2
    # The library logs (store recovery, reconnects) through `logging`; a
    # sender's INFO lines are noise.  serve sets up its own (logs.py:
    # --log-format, --log-level).
    if args.command != "serve":
        logging.basicConfig(
            level=logging.WARNING, format="%(name)s: %(levelname)s: %(message)s", stream=sys.stderr
        )
    prog = f"{PROG} {args.command}"
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        silence_stdout()
        return 0
    except UsageError as exc:
        fail(str(exc), prog)
        return 2
    except ConnectError as exc:
        fail(_connect_error(str(exc)), prog)
        return 1
    except Error as exc:
        fail(str(exc) or type(exc).__name__, prog)
        return 1
    except OSError as exc:
        fail(os_reason(exc) if exc.filename is None else str(exc), prog)
        return 1
