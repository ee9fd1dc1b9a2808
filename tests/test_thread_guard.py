"""The harness guard (tests/helpers/thread_guard.py) catches what purelink's threads swallow.

Each test runs the guard inside the one conftest.py gives it, so the inner
guard sees the failure and the outer one (the marker) expects it explicitly.
The first test is the one that would have caught a DeprecationWarning on the
link thread: without the guard, its link thread crashes and the test passes.
"""

from __future__ import annotations

import logging
import threading
import warnings
from pathlib import Path

import pytest

import purelink
import purelink.link.transport
from helpers import thread_guard


@pytest.mark.logged_exception("purelink link thread crashed")
def test_a_warning_made_an_error_on_the_link_thread_fails_the_test(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_send = purelink.link.transport.UdpTransport.send

    def deprecated_send(self: purelink.link.transport.UdpTransport, datagrams: list[bytes]) -> None:
        warnings.warn("a deprecated interpreter trick", DeprecationWarning, stacklevel=1)
        real_send(self, datagrams)

    with (
        purelink.Listener(tmp_path / "d", udp="127.0.0.1:0") as lst,
        thread_guard.guarded() as guard,
    ):
        assert lst.udp_address is not None
        link = purelink.connect("udp://%s:%d" % lst.udp_address, stream="s")
        monkeypatch.setattr(purelink.link.transport.UdpTransport, "send", deprecated_send)
        link.queue(b"x")
        with pytest.raises(purelink.LinkError, match="DeprecationWarning"):
            link.wait_stored(timeout=10)
        link.close(timeout=0)
    [failure] = guard.failures()
    assert "purelink link thread crashed" in failure
    assert "a deprecated interpreter trick" in failure  # with its traceback
    assert guard.failures(["link thread crashed"]) == []  # what the marker does


@pytest.mark.logged_exception("purelink listener loop crashed")
def test_a_crashed_listener_thread_fails_the_test(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: purelink.Listener) -> None:
        raise RuntimeError("a bug in the loop")

    monkeypatch.setattr(purelink.Listener, "_loop", broken)
    with thread_guard.guarded() as guard:
        lst = purelink.Listener(tmp_path / "d", udp="127.0.0.1:0")
        lst.start()
        lst._thread.join(10)  # type: ignore[attr-defined]
        lst.close()
    [failure] = guard.failures()
    assert "purelink.listener logged an exception on thread 'purelink-listener'" in failure
    assert "RuntimeError: a bug in the loop" in failure


def test_an_exception_escaping_any_thread_fails_the_test() -> None:
    def body() -> None:
        raise ValueError("nobody caught me")

    with thread_guard.guarded() as guard:
        thread = threading.Thread(target=body, name="stray")
        thread.start()
        thread.join()
    [failure] = guard.failures()
    assert "escaped thread 'stray'" in failure
    assert "ValueError: nobody caught me" in failure


def test_an_expected_exception_that_never_came_fails_the_test() -> None:
    with thread_guard.guarded() as guard:
        pass
    assert guard.failures(["sync of stream"]) == [
        "expected a logged exception matching 'sync of stream'; none was logged"
    ]


def test_error_lines_without_an_exception_and_other_loggers_pass() -> None:
    with thread_guard.guarded() as guard:
        logging.getLogger("purelink.link").error("a fenced link: a condition, not a bug")
        try:
            raise OSError("elsewhere")
        except OSError:
            logging.getLogger("someone.else").exception("not purelink's")
    assert guard.failures() == []


def test_a_helper_can_fail_the_running_test() -> None:
    with thread_guard.guarded() as guard:
        thread_guard.note("purelink serve wrote a traceback to stderr")
    assert guard.failures() == ["purelink serve wrote a traceback to stderr"]


def test_every_test_runs_inside_the_guard_and_the_cluster_wait(
    request: pytest.FixtureRequest,
) -> None:
    """The conftests take the autouse fixtures from helpers/fixtures.py with
    `import *`: a name starting with "_" missing from its __all__ would leave
    every test unguarded and every JetStream test on a cluster still catching up."""
    assert "_purelink_threads_raise_nothing" in request.fixturenames
    assert "_cluster_ready_before_each_test" in request.fixturenames
