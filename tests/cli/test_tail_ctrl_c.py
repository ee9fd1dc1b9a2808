"""`purelink tail --follow` and a Ctrl-C that lands just before it waits for the listener.

Why it exists: a signal delivered after the interpreter last looked for one and
before a blocking receive starts does not interrupt that receive; the Python
handler (KeyboardInterrupt) runs only once the receive returns, which for a
stream that gets no new record is never.  `purelink tail` then ignored a
Ctrl-C (seen once under load, right after it printed a record).  A sleep
cannot hit that window of a few instructions, so the tail runs in a child
with a hook that raises SIGINT (libc's `raise`, which does not look for
pending signals as `os.kill` does) inside the very C call that then waits:
`tuple(map(...))` runs both with no bytecode between them.  The hook wraps
both ways the subscriber may wait, the socket's `recv` and `select.poll`, and
fires once, at the first wait after the listener sent all it had: the record,
then the NOTICE a follower gets before the listener waits (protocol/tail.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import purelink
from helpers.cli import TIMEOUT

HOOKED_TAIL = r"""
import ctypes, functools, operator, select, signal, socket, sys
import purelink.subscribe  # the module (purelink.subscribe is the function)
from purelink import _address
from purelink.cli import main
from purelink.protocol.tail import NOTICE, encode_control

subscription = sys.modules["purelink.subscribe"]
raise_sigint = functools.partial(getattr(ctypes.CDLL(None), "raise"), signal.SIGINT)
state = {"sock": None, "received": b"", "fired": False}
# all the listener sends before it waits for a new record: the record, then "storing"
LAST = encode_control(NOTICE, "")


def nothing_pending(sock):
    try:
        socket.socket.recv(sock, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return True
    return False


def waiting(call):
    # the wait after the record, when it would block: SIGINT, then the wait, in one C call
    sock = state["sock"]
    armed = b"hello" in state["received"] and state["received"].endswith(LAST)
    if not armed or state["fired"] or sock is None or not nothing_pending(sock):
        return call()
    state["fired"] = True
    sys.stderr.write("hook: SIGINT just before the wait\n")
    return tuple(map(operator.call, (raise_sigint, call)))[1]


class Socket(socket.socket):
    def recv(self, size, flags=0):
        data = waiting(functools.partial(socket.socket.recv, self, size, flags))
        state["received"] += data
        return data


class Poll:
    def __init__(self):
        self._poll = select.poll()
        self.register = self._poll.register

    def poll(self, timeout=None):
        return waiting(functools.partial(self._poll.poll, timeout))


def connect_tcp(host, port, timeout):
    plain = real_connect(host, port, timeout)
    sock = Socket(plain.family, plain.type, fileno=plain.detach())
    sock.settimeout(timeout)
    state["sock"] = sock
    return sock


class Select:
    poll = Poll
    POLLIN = select.POLLIN


real_connect = _address.connect_tcp
_address.connect_tcp = connect_tcp
subscription.select = Select
sys.exit(main(sys.argv[1:]))
"""


def test_tail_exits_on_a_ctrl_c_that_lands_just_before_it_waits(tmp_path: Path) -> None:
    with purelink.Listener(tmp_path / "data", udp=None, tcp="127.0.0.1:0") as listener:
        assert listener.tcp_address is not None
        url = f"tcp://127.0.0.1:{listener.tcp_address[1]}"
        with purelink.connect(url, stream="s") as link:
            link.queue(b"hello")
            assert link.wait_stored(timeout=TIMEOUT)
        argv = ["tail", url, "--stream", "s", "--follow", "--reconnect", "30"]
        tail = subprocess.Popen(
            [sys.executable, "-c", HOOKED_TAIL, *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            out, err = tail.communicate(timeout=TIMEOUT)
        finally:
            if tail.poll() is None:  # the Ctrl-C was lost: it waits for ever
                tail.kill()
                tail.communicate()
    assert out == b"hello\n"
    assert err == b"hook: SIGINT just before the wait\n"
    assert tail.returncode == 130
