"""What every test gets: an unexpected exception on one of purelink's threads
fails the test that caused it (see thread_guard.py for why and how)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import thread_guard
from nats_cluster import NatsCluster


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
    that asks for it (tests/nats_cluster.py)."""
    c = NatsCluster(tmp_path_factory.mktemp("nats"))
    c.start()
    try:
        yield c
    finally:
        c.stop()
