"""The listener process of `purelink demo`, which cleans up after the demo whatever kills it.

Why it exists: the demo's listener and its temporary store must not outlive
the demo -- not after Ctrl-C, not after SIGTERM or SIGHUP, and not after a
SIGKILL of the demo, which runs no code at all.  A plain `purelink serve`
child cannot know that its parent died (PR_SET_PDEATHSIG would tell it, on
Linux, but not remove the store), so the demo runs this instead: a listener
like `serve`'s, tied to the demo by a pipe on its stdin.

    python -m purelink.cli.demo_listener WORKDIR

* it serves WORKDIR/data on a free loopback UDP port and prints serve's
  ready line (`purelink listening udp=HOST:PORT data=DIR`);
* a line `stop` on stdin: close the listener (flush, sync), print
  `purelink serve: stopped {counters}` on stdout, and keep waiting;
* end of stdin -- the demo finished and closed the pipe, or died, since the
  kernel closes a dead process's pipes -- close the listener if it still
  runs, remove WORKDIR, and exit.  The demo keeps the pipe open until it has
  read the store back, so WORKDIR goes only once nobody needs it.
* SIGTERM, SIGINT, SIGHUP: the same as the end of stdin.

Its stdin is the only tie: it runs in a session of its own, so a Ctrl-C or a
hang-up in the demo's terminal reaches only the demo, which then ends the
pipe in order.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import select
import shutil
import signal
import sys
from pathlib import Path

from .common import signals_to_pipe

__all__ = ["main"]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m purelink.cli.demo_listener WORKDIR\n")
        return 2
    workdir = Path(argv[0])
    logging.basicConfig(
        level=logging.INFO, format="%(name)s: %(levelname)s: %(message)s", stream=sys.stderr
    )
    # a signal becomes a byte here, whichever thread it lands on (common.py)
    try:
        with signals_to_pipe(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as wake_r:
            return _serve(workdir, wake_r)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _serve(workdir: Path, wake_r: int) -> int:
    from ..listener.listener import Listener  # noqa: PLC0415 -- after the signal handlers

    listener: Listener | None = Listener(workdir / "data", udp="127.0.0.1:0")
    assert listener is not None
    try:
        try:
            listener.start()
        except Exception as exc:  # the demo shows this line (an address in use, a full disk)
            sys.stderr.write(f"purelink demo: error: the demo's listener did not start: {exc}\n")
            listener = None
            return 1
        assert listener.udp_address is not None
        host, port = listener.udp_address
        print(f"purelink listening udp={host}:{port} data={workdir / 'data'}", flush=True)
        stdin = sys.stdin.fileno()
        waiting = select.poll()
        waiting.register(stdin, select.POLLIN)
        waiting.register(wake_r, select.POLLIN)
        pending = b""
        while True:
            events = dict(waiting.poll())
            if wake_r in events:
                return 0
            chunk = os.read(stdin, 4096)
            if not chunk:  # the demo is done, or gone
                return 0
            pending += chunk
            if b"stop\n" in pending and listener is not None:
                pending = b""
                listener.close()
                stats = json.dumps(dataclasses.asdict(listener.stats()), default=str)
                print(f"purelink serve: stopped {stats}", flush=True)
                listener = None
    except BrokenPipeError:  # the demo went away before reading: the end of stdin follows
        return 0
    finally:
        if listener is not None:
            listener.close()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
