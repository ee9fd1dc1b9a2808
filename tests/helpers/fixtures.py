"""What every test gets: an unexpected exception on one of purelink's threads
fails the test that caused it (see thread_guard.py for why and how); and
the processes the tests start answer SIGINT, wherever pytest was started.
tests/conftest.py and bench/tests/conftest.py take it all."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from helpers import thread_guard
from purelink.testing.nats import NatsCluster

# the conftests take these with `import *`, which leaves out a name that starts
# with "_" unless it is listed here: the autouse fixtures would silently be off
__all__ = [
    "_cluster_ready_before_each_test",
    "_purelink_threads_raise_nothing",
    "cluster",
    "pytest_configure",
]


def pytest_configure(config: pytest.Config) -> None:
    """A shell starts a background command (`pytest ... &` in a script) with SIGINT
    ignored, and a child inherits that: `purelink serve`, `send`, `tail` and
    `read --follow`, sent SIGINT by the tests that check Ctrl-C, would then
    ignore it (as they should in such a job) and those tests would wait out
    their timeouts.  Python's own handler here makes every child start with
    SIGINT at its default again."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _purelink_threads_raise_nothing(request: pytest.FixtureRequest) -> Iterator[None]:
    expected = [part for m in request.node.iter_markers("logged_exception") for part in m.args]
    with thread_guard.guarded() as guard:
        yield
    failures = guard.failures(expected)
    if failures:
        pytest.fail("\n\n".join(failures), pytrace=False)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    """A 3-node JetStream cluster of real nats-server processes, one per test module
    that asks for it (purelink.testing.nats), ready when it is handed out."""
    c = NatsCluster(tmp_path_factory.mktemp("nats"))
    try:
        c.start()
        c.wait_ready()
        yield c
    finally:
        c.stop()


@pytest.fixture(autouse=True)
def _cluster_ready_before_each_test(request: pytest.FixtureRequest) -> None:
    """A test that killed, paused or restarted nodes leaves the cluster catching
    up; the next test of the module starts once it is whole again, whatever
    ran before it (at once when nothing did)."""
    if "cluster" in request.fixturenames:
        request.getfixturevalue("cluster").wait_ready()
