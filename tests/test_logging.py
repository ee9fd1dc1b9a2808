"""purelink.logging.LinkHandler: log records shipped through a link, against real listeners.

Why it exists: a logging handler runs inside every log call of an
application, so what it must never do -- block, raise, lose records silently,
lose them at exit -- is pinned here: the JSON shape (with `extra=` fields and
exceptions), four threads at once, a listener that is down (drops counted,
calls stay fast), one that comes up late, one that restarts (a real `purelink
serve`), an interpreter that exits without closing the handler, dictConfig,
structlog and loguru, and reading the records back.  Then the hand-off from
the calling thread to the handler's: each thread's order across records
encoded on either side, close() storing exactly what was logged before it
and counting what came after, the message and extra= values frozen at the
call, a full hand-off counted in the call, flush, and no lock taken.
"""

from __future__ import annotations

import inspect
import json
import logging
import logging.config
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import loguru
import pytest
import structlog

import purelink
from helpers.serve_process import ServeProcess
from purelink.logging import LinkHandler, decode
from purelink.testing.ports import free_port


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[purelink.Listener]:
    with purelink.Listener(tmp_path / "data", udp="127.0.0.1:0") as lst:
        yield lst


def _url(listener: purelink.Listener) -> str:
    assert listener.udp_address is not None
    host, port = listener.udp_address
    return f"udp://{host}:{port}"


def _logger() -> logging.Logger:
    log = logging.getLogger(f"test.{uuid.uuid4().hex}")
    log.propagate = False
    log.setLevel(logging.DEBUG)
    return log


def _logged_to(url: str, stream: str, **handler: Any) -> tuple[logging.Logger, LinkHandler]:
    """A fresh logger (_logger) whose one handler is LinkHandler(url, stream, **handler)."""
    log = _logger()
    link_handler = LinkHandler(url, stream, **handler)
    log.addHandler(link_handler)
    return log, link_handler


def _records(data: Path, stream: str) -> list[dict[str, Any]]:
    return [decode(payload) for _, payload in purelink.Store(data).read(stream)]


def _stored(handler: LinkHandler, timeout: float, data: Path, stream: str) -> list[dict[str, Any]]:
    """Once the handler says all it took is stored (within `timeout` seconds): the
    handler closed, and the records of `stream` in `data`."""
    assert handler.wait_stored(timeout)
    handler.close()
    return _records(data, stream)


def _in_threads(n: int, work: Callable[[int], None]) -> None:
    """work(0) ... work(n - 1), each on a thread of its own, let go at once; joined."""
    start = threading.Barrier(n)

    def run(t: int) -> None:
        start.wait()
        work(t)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _each_threads_numbers(records: list[dict[str, Any]], n: int) -> list[list[int]]:
    """Of records logged as "T I" with extra t=T by threads 0 ... n - 1: each
    thread's numbers I, in the order stored."""
    seen: list[list[int]] = [[] for _ in range(n)]
    for record in records:
        t, i = map(int, record["message"].split())
        assert record["t"] == t
        seen[t].append(i)
    return seen


def _python(*args: str) -> subprocess.CompletedProcess[bytes]:
    """`python -c SCRIPT ARGS...` with this interpreter and this sys.path, output captured."""
    return subprocess.run(
        [sys.executable, "-c", *args], capture_output=True, check=False, timeout=60, env=_env()
    )


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def test_a_record_is_a_json_object_with_extra_fields_and_the_exception(
    listener: purelink.Listener,
) -> None:
    log, handler = _logged_to(_url(listener), "app-logs")
    log.info("paid %s", "order-7", extra={"order": 7, "user": {"id": 3}, "when": object()})
    try:
        raise KeyError("missing")
    except KeyError:
        log.exception("lookup failed", extra={"time": "an extra named like a fixed key"})
    log.warning("with a stack", stack_info=True)
    first, second, third = _stored(handler, 10, listener.path, "app-logs")
    assert first["message"] == "paid order-7"
    assert first["level"] == "INFO"
    assert first["logger"] == log.name
    assert first["thread"] == threading.current_thread().name
    assert abs(first["time"] - time.time()) < 60
    assert first["order"] == 7
    assert first["user"] == {"id": 3}
    assert first["when"].startswith("<object object")  # not JSON: made a string
    assert "exception" not in first
    assert second["level"] == "ERROR"
    assert "KeyError: 'missing'" in second["exception"]
    assert second["exception"].startswith("Traceback (most recent call last)")
    assert second["extra.time"] == "an extra named like a fixed key"
    assert isinstance(second["time"], float)
    assert "test_logging.py" in third["stack"]
    assert handler.dropped == 0


def test_values_json_cannot_take_are_made_strings(listener: purelink.Listener) -> None:
    log = _logger()
    cycle: list[Any] = []
    cycle.append(cycle)
    with_handler = LinkHandler(_url(listener), "odd")
    log.addHandler(with_handler)
    log.info("odd", extra={"keys": {(1, 2): "tuple key"}, "cycle": cycle, "raw": b"\xff"})
    assert with_handler.wait_stored(10)
    with_handler.close()
    (record,) = _records(listener.path, "odd")
    assert record["keys"] == {"(1, 2)": "tuple key"}
    assert record["raw"] == "b'\\xff'"
    assert isinstance(record["cycle"], list)


def test_four_threads_lose_nothing_and_keep_each_threads_order(
    listener: purelink.Listener,
) -> None:
    log, handler = _logged_to(_url(listener), "threads")
    per_thread = 2_000

    def work(t: int) -> None:
        for i in range(per_thread):
            log.info("%d %d", t, i, extra={"t": t})

    _in_threads(4, work)
    records = _stored(handler, 30, listener.path, "threads")
    assert len(records) == 4 * per_thread
    assert _each_threads_numbers(records, 4) == [list(range(per_thread))] * 4
    assert handler.dropped == 0


def test_with_the_listener_down_calls_stay_fast_and_drops_are_counted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    log, handler = _logged_to(
        f"udp://127.0.0.1:{free_port(socket.SOCK_DGRAM)}", "down", capacity=100, timeout=0.5
    )
    started = time.perf_counter()
    for i in range(1_000):
        log.info("record %d", i)
    took = time.perf_counter() - started
    assert took < 2.0, f"1,000 log calls took {took:.2f} s with the listener down"
    assert handler.pending == 100
    assert handler.dropped == 900
    started = time.perf_counter()
    handler.close()
    assert time.perf_counter() - started < 5.0  # timeout=0.5 and a connect in flight
    assert handler.dropped == 1_000  # the 100 held ones too, once close gave up
    log.info("after close")
    assert handler.dropped == 1_001
    err = capsys.readouterr().err
    assert err.count("dropped a log record") == 1  # warned once


def test_records_logged_before_the_listener_is_up_are_stored_in_order(tmp_path: Path) -> None:
    port = free_port(socket.SOCK_DGRAM)
    log, handler = _logged_to(f"udp://127.0.0.1:{port}", "late", timeout=20)
    for i in range(300):
        log.info("early %d", i)
    assert handler.link is None
    with ServeProcess(tmp_path / "data", port=port):
        for i in range(300):
            log.info("later %d", i)
        messages = [r["message"] for r in _stored(handler, 30, tmp_path / "data", "late")]
    expected = [f"early {i}" for i in range(300)] + [f"later {i}" for i in range(300)]
    assert messages == expected
    assert handler.dropped == 0


def test_nothing_is_lost_across_a_listener_restart(tmp_path: Path) -> None:
    serve = ServeProcess(tmp_path / "data").start()
    try:
        log, handler = _logged_to(serve.url, "restart", timeout=20)
        for i in range(500):
            log.info("before %d", i)
        assert handler.wait_stored(20)
        serve.stop()
        for i in range(500):  # the link keeps them while nobody listens
            log.info("during %d", i)
        assert not handler.wait_stored(0.2)
        serve.restart()
        for i in range(500):
            log.info("after %d", i)
        messages = [r["message"] for r in _stored(handler, 30, tmp_path / "data", "restart")]
    finally:
        if serve.proc is not None:
            serve.stop()
    expected = [f"{phase} {i}" for phase in ("before", "during", "after") for i in range(500)]
    assert messages == expected
    assert handler.dropped == 0


EXITING = """
import logging, sys
from purelink.logging import LinkHandler
root = logging.getLogger()
root.addHandler(LinkHandler(sys.argv[1], "exit", timeout=float(sys.argv[2])))
root.setLevel(logging.INFO)
for i in range(2000):
    logging.info("record %d", i)
# no close(): logging.shutdown() runs at exit and must store them all
"""


def test_records_are_stored_at_interpreter_exit_without_close(tmp_path: Path) -> None:
    with ServeProcess(tmp_path / "data") as serve:
        done = _python(EXITING, serve.url, "20")
        assert done.returncode == 0, done.stderr
        messages = [r["message"] for r in _records(tmp_path / "data", "exit")]
    assert messages == [f"record {i}" for i in range(2000)]
    assert b"purelink.logging" not in done.stderr


def test_where_exit_refuses_threads_the_handler_starts_its_links_thread_at_once(
    listener: purelink.Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CPython 3.12.0-3.12.1 refuse a new thread at exit (gh-113964): there the
    constructor returns only once its link's thread is started (else the
    program above, on 3.12.1 and 2 loaded cores, often lost every record)."""
    monkeypatch.setattr(purelink.logging, "_EXIT_REFUSES_THREADS", True)
    handler = LinkHandler(_url(listener), "launch")
    try:
        assert handler._launched.is_set()
        link_threads = [t for t in threading.enumerate() if t.name == "purelink-link-launch"]
        assert link_threads and link_threads[0].is_alive()  # started, not failed
    finally:
        handler.close()


def test_exit_with_the_listener_down_waits_only_the_timeout() -> None:
    started = time.monotonic()
    done = _python(EXITING, f"udp://127.0.0.1:{free_port(socket.SOCK_DGRAM)}", "1")
    assert done.returncode == 0
    assert time.monotonic() - started < 15
    err = done.stderr.decode()
    assert "dropped a log record" in err
    assert "Traceback" not in err


def test_dictconfig_builds_it_and_a_formatter_replaces_the_json(
    listener: purelink.Listener,
) -> None:
    name = f"test.dict.{uuid.uuid4().hex}"
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {"plain": {"format": "%(levelname)s %(name)s %(message)s"}},
            "handlers": {
                "link": {
                    "class": "purelink.logging.LinkHandler",
                    "url": _url(listener),
                    "stream": "dict",
                    "capacity": 1000,
                    "level": "INFO",
                    "formatter": "plain",
                }
            },
            "loggers": {name: {"handlers": ["link"], "level": "DEBUG", "propagate": False}},
        }
    )
    log = logging.getLogger(name)
    (handler,) = log.handlers
    assert isinstance(handler, LinkHandler)
    log.debug("below the handler's level")
    log.info("formatted")
    assert handler.wait_stored(10)
    handler.close()
    log.removeHandler(handler)
    payloads = [p for _, p in purelink.Store(listener.path).read("dict")]
    assert payloads == [f"INFO {name} formatted".encode()]


def test_basicconfig_keeps_the_json(listener: purelink.Listener) -> None:
    root = logging.getLogger()
    before = root.handlers[:]
    handler = LinkHandler(_url(listener), "basic")
    root.handlers.clear()  # basicConfig does nothing where the root has handlers
    try:
        logging.basicConfig(level=logging.INFO, handlers=[handler])
        logging.getLogger("shop").info("order %s paid", 7)
        assert handler.wait_stored(10)
    finally:
        root.handlers[:] = before
        handler.close()
    (record,) = _records(listener.path, "basic")
    assert (record["logger"], record["message"]) == ("shop", "order 7 paid")


def test_json_formatter_works_on_any_handler() -> None:
    from purelink.logging import JSONFormatter  # noqa: PLC0415

    record = logging.makeLogRecord({"msg": "m %d", "args": (1,), "levelname": "INFO", "k": "v"})
    assert decode(JSONFormatter().format(record)) == decode(JSONFormatter().encode(record))
    assert decode(JSONFormatter().format(record))["k"] == "v"


def test_purelink_read_json_gives_the_records_back(listener: purelink.Listener) -> None:
    log, handler = _logged_to(_url(listener), "cli")
    log.info("one", extra={"n": 1})
    log.info("two", extra={"n": 2})
    assert handler.wait_stored(10)
    handler.close()
    read = ["read", "--data", str(listener.path), "--stream", "cli", "--format", "json"]
    done = subprocess.run(
        [sys.executable, "-m", "purelink", *read],
        capture_output=True,
        check=True,
        timeout=60,
        env=_env(),
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["position"] for line in lines] == [1, 2]
    records = [decode(line["payload"].encode()) for line in lines]  # JSON logs: as text
    assert [(r["message"], r["n"]) for r in records] == [("one", 1), ("two", 2)]


def test_structlog_sends_through_it(listener: purelink.Listener) -> None:
    log, handler = _logged_to(_url(listener), "structlog")
    structlog.configure(
        processors=[structlog.stdlib.render_to_log_kwargs],  # as docs/logging.md
        logger_factory=lambda *args: log,
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    try:
        structlog.get_logger().bind(request="r-1").info("paid", order=7)
    finally:
        structlog.reset_defaults()
    (record,) = _stored(handler, 10, listener.path, "structlog")
    assert record["message"] == "paid"
    assert (record["order"], record["request"], record["level"]) == (7, "r-1", "INFO")
    # the fields docs/logging.md's sample shows, and nothing more (no extra.level)
    assert set(record) == {"time", "level", "logger", "message", "thread", "order", "request"}


def test_loguru_sends_through_it(listener: purelink.Listener) -> None:
    handler = LinkHandler(_url(listener), "loguru")
    sink = loguru.logger.add(handler, format="{message}")
    try:
        loguru.logger.bind(order=7).info("paid")
        try:
            1 / 0  # noqa: B018
        except ZeroDivisionError:
            loguru.logger.exception("failed")
        assert handler.wait_stored(10)
    finally:
        loguru.logger.remove(sink)  # closes the handler
    first, second = _records(listener.path, "loguru")
    assert first["message"] == "paid"
    assert first["extra"] == {"order": 7}
    assert "ZeroDivisionError" in second["exception"]


def test_bad_arguments_fail_at_construction() -> None:
    with pytest.raises(ValueError, match="stream"):
        LinkHandler("udp://127.0.0.1:1", "../etc")
    with pytest.raises(ValueError):
        LinkHandler("http://127.0.0.1:1", "s")
    with pytest.raises(ValueError, match="capacity"):
        LinkHandler("udp://127.0.0.1:1", "s", capacity=0)
    with pytest.raises(ValueError, match="16 bytes"):
        LinkHandler("udp://127.0.0.1:1", "s", secret="short")


def test_key_id_is_passed_only_where_connect_takes_it(listener: purelink.Listener) -> None:
    if "key_id" in inspect.signature(purelink.connect).parameters:
        handler = LinkHandler(_url(listener), "keyed", key_id="k1", timeout=1)
        handler.close()
    else:
        with pytest.raises(ValueError, match="key_id"):
            LinkHandler(_url(listener), "keyed", key_id="k1")


def test_a_refusal_that_cannot_heal_is_not_retried(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wrong secret: the handler says so on stderr at once, stops trying, drops
    and counts what it held and what comes later, and says so again at close."""
    with purelink.Listener(tmp_path / "data", udp="127.0.0.1:0", secret=b"s" * 32) as lst:
        log, handler = _logged_to(_url(lst), "wrong", secret=b"w" * 32, timeout=60)
        log.info("held, then dropped")
        assert handler._up.wait(30)  # given up: not retrying for the 60 s close would wait
        assert handler.link is None
        log.info("after it gave up")
        assert handler.dropped == 2
        started = time.monotonic()
        handler.close()
        assert time.monotonic() - started < 5  # nothing to wait for
        assert lst.stats().dropped == {"bad_secret": 1}  # one try, not one per backoff
    err = capsys.readouterr().err
    assert "refused the handler for good" in err and "wrong secret" in err
    assert "closed with 2 log records for stream 'wrong' dropped" in err


def test_a_listener_that_refuses_for_now_is_said_once_each_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The listener's store fails on the handler's stream (an fsync, injected):
    the handler says on stderr that its records wait, and why."""
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        if "/held/" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(5, "Input/output error (injected)")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    with purelink.Listener(tmp_path / "data", udp="127.0.0.1:0") as lst:
        log, handler = _logged_to(_url(lst), "held", timeout=0.5)
        log.info("never stored")
        wait_until = time.monotonic() + 30
        while "refused stream 'held' for now" not in (err := capsys.readouterr().err):
            assert time.monotonic() < wait_until, "the handler said nothing"
            log.info("and another")  # a wake: the handler looks at its link
            time.sleep(0.05)  # paces the log calls; the stderr line is what is waited for
        assert "(stream_failed)" in err
        handler.close()


def test_secret_file(tmp_path: Path) -> None:
    secret = b"s" * 32
    (tmp_path / "secret").write_bytes(secret + b"\n")
    with purelink.Listener(tmp_path / "data", udp="127.0.0.1:0", secret=secret) as lst:
        log, handler = _logged_to(_url(lst), "secret", secret_file=tmp_path / "secret")
        log.info("authenticated")
        assert [r["message"] for r in _stored(handler, 10, lst.path, "secret")] == ["authenticated"]


def test_decode_refuses_what_is_not_a_record() -> None:
    assert decode(b'{"message": "m", "level": "INFO"}')["message"] == "m"
    for payload in (b"[1, 2]", b'{"no": "message"}', "plain text"):
        with pytest.raises(ValueError):
            decode(payload)


FORKING = """
import logging, os, sys
from purelink.logging import LinkHandler
log = logging.getLogger("fork")
log.addHandler(LinkHandler(sys.argv[1], "fork", timeout=20))
log.setLevel(logging.INFO)
log.info("parent before fork")
pid = os.fork()
log.info("child" if pid == 0 else "parent after fork")
if pid:
    os.waitpid(pid, 0)
"""


def test_a_forked_child_connects_on_its_own(tmp_path: Path) -> None:
    with ServeProcess(tmp_path / "data") as serve:
        done = _python(textwrap.dedent(FORKING), serve.url)
        assert done.returncode == 0, done.stderr
        messages = sorted(r["message"] for r in _records(tmp_path / "data", "fork"))
    assert messages == ["child", "parent after fork", "parent before fork"]


# ------------------------------------------- the hand-off to the handler's thread
def test_each_threads_order_holds_across_records_encoded_here_and_on_the_thread(
    listener: purelink.Listener,
) -> None:
    """Plain records are encoded by the handler's thread, those with an exception
    or a mutable extra= value in the caller's: both go through one FIFO."""
    log, handler = _logged_to(_url(listener), "mixed")
    per_thread = 600

    def work(t: int) -> None:
        for i in range(per_thread):
            if i % 3 == 0:
                log.info("%d %d", t, i, extra={"t": t})  # captured, encoded later
            elif i % 3 == 1:
                log.info("%d %d", t, i, extra={"t": t, "tags": [i]})  # encoded here
            else:
                try:
                    raise ValueError(i)
                except ValueError:
                    log.exception("%d %d", t, i, extra={"t": t})  # encoded here

    _in_threads(4, work)
    records = _stored(handler, 30, listener.path, "mixed")
    assert _each_threads_numbers(records, 4) == [list(range(per_thread))] * 4
    for record in records:
        i = int(record["message"].split()[1])
        assert ("tags" in record) == (i % 3 == 1)
        assert ("exception" in record) == (i % 3 == 2)
    assert handler.dropped == 0


def test_close_right_after_logging_stores_exactly_what_was_logged(
    listener: purelink.Listener,
) -> None:
    log, handler = _logged_to(_url(listener), "closing", timeout=30)
    while handler.link is None:  # the calls below all go through the hand-off
        assert handler.wait_stored(10)
    for i in range(5_000):
        log.info("record %d", i, extra={"i": i})
    handler.close()  # no wait_stored: close() itself takes the hand-off to the store
    records = _records(listener.path, "closing")
    assert [(r["message"], r["i"]) for r in records] == [(f"record {i}", i) for i in range(5_000)]
    assert handler.dropped == 0 and handler.pending == 0


def test_records_logged_while_close_runs_are_stored_or_counted_never_lost(
    listener: purelink.Listener,
) -> None:
    log, handler = _logged_to(_url(listener), "racing", timeout=30)
    assert handler.wait_stored(10)
    logged = [0, 0]
    started = [threading.Event(), threading.Event()]
    closed = threading.Event()

    def work(t: int) -> None:
        started[t].set()
        i = after = 0
        while after < 100 and i < 200_000:  # until 100 calls after close() returned
            log.info("%d %d", t, i)
            i += 1
            after += closed.is_set()
        logged[t] = i

    threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for thread in threads:
        thread.start()
    assert all(event.wait(10) for event in started)
    for _ in range(200):
        log.info("main")
    handler.close()
    closed.set()
    for thread in threads:
        thread.join()
    stored = _records(listener.path, "racing")
    assert len(stored) + handler.dropped == sum(logged) + 200
    assert handler.dropped >= 200  # the calls after close() returned, at least
    assert sum(r["message"] == "main" for r in stored) == 200  # all logged before close()
    for t in range(2):  # what was stored of each thread is its first records, in order
        mine = [int(r["message"].split()[1]) for r in stored if r["message"].startswith(f"{t} ")]
        assert mine == list(range(len(mine)))


def test_the_message_and_extra_values_are_those_of_the_call(tmp_path: Path) -> None:
    """Encoded after the mutations below (nothing is taken from the hand-off until
    the listener is up): the stored record still shows the call's values."""
    port = free_port(socket.SOCK_DGRAM)
    log, handler = _logged_to(f"udp://127.0.0.1:{port}", "frozen", timeout=20)
    items = ["a"]
    user = {"id": 1}
    seen_records: list[logging.LogRecord] = []

    class Keep(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            seen_records.append(record)
            return True

    log.addFilter(Keep())
    log.info("items %s", items, extra={"n": 1})
    log.info("user %s", user["id"], extra={"user": user})
    items.append("b")
    user["id"] = 2
    for record in seen_records:  # as a later handler or filter might
        record.msg = "changed"
        record.n = 99
    assert handler.link is None
    with purelink.Listener(tmp_path / "data", udp=f"127.0.0.1:{port}"):
        first, second = _stored(handler, 30, tmp_path / "data", "frozen")
    assert (first["message"], first["n"]) == ("items ['a']", 1)
    assert (second["message"], second["user"]) == ("user 1", {"id": 1})


def test_a_full_hand_off_drops_and_counts_then_the_rest_is_stored(
    listener: purelink.Listener, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log, handler = _logged_to(_url(listener), "full", capacity=100, timeout=20)
    assert handler.wait_stored(10)
    entered, release = threading.Event(), threading.Event()
    send = handler._send

    def held(link: purelink.Link, item: Any) -> None:
        entered.set()
        release.wait(20)  # the handler's thread stops here: the hand-off fills up
        send(link, item)

    monkeypatch.setattr(handler, "_send", held)
    log.info("record 0")
    assert entered.wait(10)
    for i in range(1, 1_000):
        log.info("record %d", i)
    assert handler.pending == 100  # records 1-100; record 0 is in the thread's hands
    assert handler.dropped == 899  # counted in the call, at once
    release.set()
    monkeypatch.setattr(handler, "_send", send)
    handler.close()
    messages = [r["message"] for r in _records(listener.path, "full")]
    assert len(messages) + handler.dropped == 1_000
    assert messages == [f"record {i}" for i in range(len(messages))]
    assert len(messages) >= 100  # what the link itself can hold: at most 1 refused by it
    assert capsys.readouterr().err.count("dropped a log record") == 1


def test_flush_puts_everything_on_the_link(listener: purelink.Listener) -> None:
    log, handler = _logged_to(_url(listener), "flush")
    assert handler.wait_stored(10)
    for i in range(2_000):
        log.info("record %d", i)
    handler.flush()
    link = handler.link
    assert link is not None
    assert handler.pending == 0
    assert link.queued == 2_000
    handler.close()


def test_a_log_call_takes_no_lock_of_the_handler(listener: purelink.Listener) -> None:
    log, handler = _logged_to(_url(listener), "unlocked")
    held, done = threading.Event(), threading.Event()

    def hold_lock() -> None:
        with handler.lock or threading.Lock():  # what logging.shutdown() holds around close
            held.set()
            done.wait(20)

    holder = threading.Thread(target=hold_lock)
    holder.start()
    assert held.wait(10)
    caller = threading.Thread(target=lambda: [log.info("record %d", i) for i in range(100)])
    caller.start()
    caller.join(10)
    blocked = caller.is_alive()
    done.set()
    holder.join()
    caller.join()
    assert not blocked, "a log call waited for the handler's lock"
    assert len(_stored(handler, 10, listener.path, "unlocked")) == 100


def test_import_star_does_not_shadow_the_standard_logging_module() -> None:
    namespace: dict[str, Any] = {}
    exec("import logging\nfrom purelink import *", namespace)
    assert namespace["logging"] is logging
    assert "logging" not in purelink.__all__ and "metrics" not in purelink.__all__
    assert purelink.logging.LinkHandler is LinkHandler  # still reachable as an attribute
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from purelink import *\nimport logging\nlogging.getLogger('x')\n"
            "import purelink.logging\nprint(purelink.logging.LinkHandler.__name__)",
        ],
        capture_output=True,
        check=True,
        timeout=60,
        env=_env(),
    )
    assert done.stdout.strip() == b"LinkHandler"


def test_the_handlers_filters_still_run(listener: purelink.Listener) -> None:
    log, handler = _logged_to(_url(listener), "filtered")

    def only_even(record: logging.LogRecord) -> bool:
        record.checked = True  # a filter may add a field: it is an extra= field then
        return int(record.getMessage().split()[1]) % 2 == 0

    handler.addFilter(only_even)
    for i in range(10):
        log.info("record %d", i)
    records = _stored(handler, 10, listener.path, "filtered")
    assert [r["message"] for r in records] == [f"record {i}" for i in range(0, 10, 2)]
    assert all(r["checked"] is True for r in records)


SLEEPING_AT_EXIT = """
import logging, sys, time
from purelink.logging import LinkHandler
root = logging.getLogger()
handler = LinkHandler(sys.argv[1], "asleep", timeout=10)
root.addHandler(handler)
root.setLevel(logging.INFO)
logging.info("first")
assert handler.wait_stored(10)
time.sleep(0.1)  # the handler's thread is asleep now: the next call wakes it
logging.info("second")
"""


def test_a_record_that_wakes_the_handlers_thread_at_exit_is_stored(tmp_path: Path) -> None:
    """logging.shutdown() runs after weakref's exit hook: the thread's wakeup must
    still be open then."""
    with ServeProcess(tmp_path / "data") as serve:
        done = _python(SLEEPING_AT_EXIT, serve.url)
        assert done.returncode == 0, done.stderr
        messages = [r["message"] for r in _records(tmp_path / "data", "asleep")]
    assert messages == ["first", "second"]
    assert b"Traceback" not in done.stderr
