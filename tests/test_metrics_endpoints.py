"""`serve --metrics`' HTTP endpoints and what an operator reads there.

Why it exists: an orchestrator asks `/healthz` and `/readyz`, Prometheus
scrapes `/metrics`, and alerts are written against the names.  The tests
scrape a real `purelink serve --metrics` (or a Listener with the same
MetricsServer), parse the text with prometheus-client's own parser, and
check: the paths (404 for others); readiness refused for a real reason (a
--min-free mark above the disk's free space); build info; every drop reason
at 0 from the start; per-stream first/last positions that retention moves;
key reloads and their failures counted; TCP connections of links and of
subscribers apart, and TCP frames counted as frames; two links to one stream
as two series of LinkCollector.  And that every drop reason the source
counts is in DROP_REASONS, so none first appears only when it happens.
"""

from __future__ import annotations

import re
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import purelink
from helpers.serve_process import ServeProcess
from purelink.listener.stats import DROP_REASONS
from purelink.metrics import LinkCollector
from purelink.metrics_http import MetricsServer
from purelink.testing.ports import free_port

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
SRC = Path(purelink.__file__).parent


def _parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _get(port: int, path: str) -> tuple[int, str, str]:
    """(status, content type, body) of a GET."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def _scrape(port: int) -> Samples:
    status, kind, body = _get(port, "/metrics")
    assert status == 200 and kind.startswith("text/plain"), (status, kind)
    return _parse(body)


def _until(port: int, check: Callable[[Samples], bool], timeout: float = 20.0) -> Samples:
    """Scrape until `check` holds (or fail at the deadline)."""
    deadline = time.monotonic() + timeout
    while True:
        samples = _scrape(port)
        if check(samples):
            return samples
        assert time.monotonic() < deadline, "the metrics never got there"
        time.sleep(0.05)


def test_paths_build_info_drops_from_zero_and_positions(tmp_path: Path) -> None:
    port = free_port()
    with ServeProcess(tmp_path / "data", extra=["--metrics", f"127.0.0.1:{port}"]) as serve:
        assert _get(port, "/healthz")[::2] == (200, "ok\n")
        assert _get(port, "/readyz")[::2] == (200, "ready\n")
        status, _, body = _get(port, "/nope")
        assert status == 404 and "/metrics" in body
        assert _get(port, "/")[0] == 404

        before = _scrape(port)
        info = [labels for (name, labels), v in before.items() if name == "purelink_build_info"]
        assert info == [(("python", info[0][0][1]), ("version", purelink.__version__))]
        assert re.fullmatch(r"3\.\d+\.\d+\S*", info[0][0][1])
        drops = {
            dict(k)["reason"]: v for (n, k), v in before.items() if n == "purelink_dropped_total"
        }
        assert set(drops) == set(DROP_REASONS) and not any(drops.values())
        assert before[("purelink_key_reloads_total", ())] == 0
        assert before[("purelink_key_reload_failures_total", ())] == 0
        assert not any(name.startswith("purelink_datagrams_received") for name, _ in before)
        internal = {name for name, _ in before if name.startswith("purelink_internal_")}
        assert "purelink_internal_pool_hits_total" in internal
        assert ("purelink_pool_hits_total", ()) not in before

        with purelink.connect(serve.url, stream="orders") as link:
            for i in range(25):
                link.queue(b"%d" % i)
            assert link.wait_stored(timeout=20)
        after = _scrape(port)
        orders = (("stream", "orders"),)
        assert after[("purelink_stream_first_position", orders)] == 1
        assert after[("purelink_stream_last_position", orders)] == 25
        assert after[("purelink_stream_size_bytes", orders)] > 0
        assert after[("purelink_udp_datagrams_received_total", ())] > 0
        assert after[("purelink_tcp_frames_received_total", ())] == 0
        assert after[("purelink_received_bytes_total", (("transport", "udp"),))] > 0


def test_readyz_is_503_with_the_reason_below_the_min_free_mark(tmp_path: Path) -> None:
    port = free_port()
    mark = "--min-free", str(1 << 60)  # an exabyte: no disk here has that free
    with ServeProcess(tmp_path / "data", extra=["--metrics", f"127.0.0.1:{port}", *mark]):
        status, kind, body = _get(port, "/readyz")
        assert _get(port, "/healthz")[0] == 200  # up, but not to be sent records
    assert status == 503 and kind.startswith("text/plain")
    assert body.startswith("not ready: data directory below the --min-free mark"), body


def test_key_reloads_and_their_failures_are_counted(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s" * 32 + "\n")
    port = free_port()
    extra = ["--metrics", f"127.0.0.1:{port}", "--secret-file", str(secret)]
    with ServeProcess(tmp_path / "data", extra=extra) as serve:
        assert serve.proc is not None
        serve.proc.send_signal(signal.SIGHUP)
        done = _until(port, lambda s: s[("purelink_key_reloads_total", ())] == 1)
        assert done[("purelink_key_reload_failures_total", ())] == 0
        secret.write_text("short\n")  # under 16 bytes: refused, the old one stays
        serve.proc.send_signal(signal.SIGHUP)
        failed = _until(port, lambda s: s[("purelink_key_reload_failures_total", ())] == 1)
        assert failed[("purelink_key_reloads_total", ())] == 1


def test_tcp_connections_of_links_and_subscribers_and_frames(tmp_path: Path) -> None:
    link_conns = ("purelink_tcp_connections", (("role", "link"),))
    sub_conns = ("purelink_tcp_connections", (("role", "subscriber"),))
    with purelink.Listener(tmp_path / "data", udp=None, tcp="127.0.0.1:0") as listener:
        server = MetricsServer(listener, "127.0.0.1:0")
        port = server.address[1]
        try:
            assert listener.tcp_address is not None
            url = "tcp://%s:%d" % listener.tcp_address
            with purelink.connect(url, stream="s") as link:
                link.queue(b"one")
                assert link.wait_stored(timeout=20)
                with (
                    purelink.subscribe(url, "s", start=1, follow=True) as first,
                    purelink.subscribe(url, "s", start=1, follow=True) as second,
                ):
                    assert next(iter(first))[0] == 1 and next(iter(second))[0] == 1
                    # a connection the subscription server took leaves the link side
                    # at the end of the listener's round: wait for that, not a moment
                    during = _until(port, lambda s: s[link_conns] == 1 and s[sub_conns] == 2)
        finally:
            server.close()
    assert during[("purelink_subscriptions", ())] == 2
    assert during[("purelink_tcp_frames_received_total", ())] > 0
    assert during[("purelink_udp_datagrams_received_total", ())] == 0
    assert during[("purelink_received_bytes_total", (("transport", "tcp"),))] > 0
    assert during[("purelink_received_bytes_total", (("transport", "udp"),))] == 0


def test_link_collector_two_links_to_one_stream_are_two_series(tmp_path: Path) -> None:
    with purelink.Listener(tmp_path / "data", udp="127.0.0.1:0") as listener:
        assert listener.udp_address is not None
        url = "udp://%s:%d" % listener.udp_address
        with (
            purelink.connect(url, stream="app") as one,
            purelink.connect(url, stream="app") as two,
            purelink.connect(url, stream="app", producer="billing") as named,
        ):
            registry = CollectorRegistry(auto_describe=True)
            registry.register(LinkCollector(one, two, named))
            for link, count in ((one, 3), (two, 5), (named, 7)):
                for i in range(count):
                    link.queue(b"%d" % i)
                assert link.wait_stored(timeout=20)
            samples = _parse(generate_latest(registry).decode())
            again = _parse(generate_latest(registry).decode())
    queued = {
        dict(labels)["producer"]: value
        for (name, labels), value in samples.items()
        if name == "purelink_link_records_queued_total"
    }
    anonymous = sorted(p for p in queued if p.startswith("anonymous-"))
    assert len(anonymous) == 2 and len(queued) == 3
    assert sorted(queued[p] for p in anonymous) == [3, 5]
    assert queued["billing"] == 7
    assert all(dict(labels)["url"] == url for (_, labels) in samples if labels)
    assert again.keys() == samples.keys()  # the ids stay the same from scrape to scrape


# ------------------------------------------------------- every drop reason known
_SINKS = re.compile(
    r"_drop\(|_outer_drop\(|_key_refused\(|_refuse_hello\(|ProtocolError\(|FrameError\("
    r"|Refused\(|_count\(|_close\(conn|reason = |counter = |dropped\[|reason, counter = "
)
_PATHS = (
    "protocol/wire.py", "protocol/batch.py", "protocol/channel.py", "protocol/handshake.py",
    "protocol/receiver.py", "protocol/framing.py", "protocol/listener_core.py",
    "protocol/secure_core.py", "protocol/core_*.py", "listener/*.py", "listener/tail/*.py",
)  # fmt: skip
_NOT_DROPS = {"stored", "duplicate", "held"}  # receiver results that are not drops


def _counted_reasons() -> set[str]:
    """The reason strings on the lines of the listener's side that count a drop."""
    found: set[str] = set()
    for pattern in _PATHS:
        for path in SRC.glob(pattern):
            lines = path.read_text().splitlines()
            for number, line in enumerate(lines):
                sink = _SINKS.search(line)
                if sink is None and path.name == "receiver.py":
                    sink = re.search(r"return (?=\")", line)
                if sink is not None:  # the first string after it, on this line or the next
                    after = " ".join([line[sink.end() :], *lines[number + 1 : number + 2]])
                    first = re.search(r"\"([a-z][a-z_]+)\"", after)
                    if first is not None:
                        found.add(first.group(1))
    return found - _NOT_DROPS


def test_every_drop_reason_the_source_counts_is_known() -> None:
    counted = _counted_reasons()
    assert {"bad_cookie", "junk_frames", "tail_rate_limited", "reorder_full"} <= counted
    # subscription requests: their decoding errors become tail_bad_request, the
    # key ones tail_<reason> (tail/server.py)
    decoding = {
        "bad_preamble",
        "bad_flags",
        "bad_name",
        "bad_start",
        "refused",
        "unexpected_secret",
    }
    missing = counted - set(DROP_REASONS) - decoding
    assert not missing, f"counted but not in DROP_REASONS: {sorted(missing)}"
    for reason in ("unauthenticated", "unknown_key", "expired_key", "bad_secret", "forbidden"):
        assert f"tail_{reason}" in DROP_REASONS
    assert len(set(DROP_REASONS)) == len(DROP_REASONS)
