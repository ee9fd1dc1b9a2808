"""The test cluster of real nats-server processes (purelink.testing.nats): a node
that exits on its own before the cluster is first ready (another process on
the machine took one of its ports after `free_ports` chose it, as happens
when test lanes run side by side) makes the whole cluster start again on
fresh ports; once a test has killed or restarted nodes, such an exit is
reported at once instead of after wait_ready's timeout; `pause` returns
only once every thread of the node has stopped."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from purelink.testing.nats import NatsCluster, nats_server_binary, thread_states, wait_stopped

pytestmark = pytest.mark.skipif(nats_server_binary() is None, reason="no nats-server")


def die(cluster: NatsCluster, i: int) -> None:
    """Node `i` exits on its own: killed behind the cluster's back."""
    proc = cluster.procs[i]
    assert proc is not None
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def test_a_node_that_exits_before_the_cluster_is_ready_starts_it_again(tmp_path: Path) -> None:
    cluster = NatsCluster(tmp_path)
    try:
        cluster.start()
        chosen = list(cluster.client_ports)
        die(cluster, 2)
        cluster.wait_ready(timeout=30.0)
        assert cluster.client_ports != chosen, "started again on fresh ports"
        assert all(p is not None and p.poll() is None for p in cluster.procs)
    finally:
        cluster.stop()


def test_after_a_test_killed_a_node_an_exit_is_reported_at_once(tmp_path: Path) -> None:
    cluster = NatsCluster(tmp_path)
    try:
        cluster.start()
        cluster.wait_ready(timeout=30.0)
        cluster.kill(0)
        cluster.start(0)
        die(cluster, 1)
        began = time.monotonic()
        with pytest.raises(RuntimeError, match="nats-server n2 exited"):
            cluster.wait_ready(timeout=30.0)
        assert time.monotonic() - began < 5.0
    finally:
        cluster.stop()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="no /proc")
def test_pause_returns_once_every_thread_of_the_node_has_stopped(tmp_path: Path) -> None:
    cluster = NatsCluster(tmp_path)
    try:
        cluster.start()
        cluster.wait_ready(timeout=30.0)
        proc = cluster.procs[1]
        assert proc is not None
        assert len(thread_states(proc.pid)) > 1  # a Go server: several threads to stop
        cluster.pause(1)
        assert set(thread_states(proc.pid)) <= {"T", "t"}
        cluster.resume(1)
        cluster.wait_ready(timeout=30.0)  # it answers again
        assert "T" not in thread_states(proc.pid)
    finally:
        cluster.stop()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="no /proc")
def test_the_wait_for_a_stop_looks_at_the_threads_and_has_a_deadline() -> None:
    """A process whose threads run is not taken for stopped (the wait times
    out); once SIGSTOPped it is; once it has exited there is nothing to
    wait for."""
    code = "import threading, time\nthreading.Thread(target=time.sleep, args=(60,)).start()\n"
    code += "time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        with pytest.raises(TimeoutError, match="did not stop"):
            wait_stopped(proc.pid, timeout=0.2)
        assert proc.poll() is None  # it timed out on a running process, not a dead one
        proc.send_signal(signal.SIGSTOP)
        wait_stopped(proc.pid, timeout=10.0)
        assert set(thread_states(proc.pid)) <= {"T", "t"}
        proc.kill()
        began = time.monotonic()
        wait_stopped(proc.pid, timeout=10.0)  # an exited process: nothing to wait for
        assert time.monotonic() - began < 5.0
    finally:
        proc.kill()
        proc.wait(10)
