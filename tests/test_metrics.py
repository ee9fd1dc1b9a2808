"""Prometheus metrics: `purelink serve --metrics` scraped over HTTP, and LinkCollector.

Why it exists: an operator's dashboards and alerts read these names, so the
test scrapes a real `purelink serve --metrics` process, parses the text with
prometheus-client's own parser (so the format is valid, not just present)
and checks that the counters rise as records are stored; and that the flag
fails cleanly (one line, exit 2) where prometheus-client is not installed.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import purelink
from helpers.serve_process import ServeProcess
from purelink.logging import LinkHandler
from purelink.metrics import LinkCollector
from purelink.testing.ports import free_port

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        return _parse(response.read().decode())


def _ship(url: str, stream: str, count: int) -> None:
    with purelink.connect(url, stream=stream) as link:
        for i in range(count):
            link.queue(b"record %06d" % i)
        assert link.wait_stored(timeout=20)


def test_serve_metrics_counts_rise_as_records_are_stored(tmp_path: Path) -> None:
    port = free_port()
    with ServeProcess(tmp_path / "data", extra=["--metrics", f"127.0.0.1:{port}"]) as serve:
        before = _scrape(port)
        assert before[("purelink_records_stored_total", ())] == 0
        assert before[("purelink_sync_seconds_count", ())] == 0
        assert before[("purelink_links", ())] == 0

        _ship(serve.url, "orders", 1000)
        first = _scrape(port)
        orders = (("stream", "orders"),)
        assert first[("purelink_stream_records_stored_total", orders)] == 1000
        assert first[("purelink_stream_stored_bytes_total", orders)] > 1000 * 13
        assert first[("purelink_records_stored_total", ())] == 1000
        assert first[("purelink_udp_datagrams_received_total", ())] > 0
        syncs = first[("purelink_syncs_total", ())]
        assert syncs >= 1
        assert first[("purelink_sync_seconds_count", ())] == syncs
        assert first[("purelink_sync_seconds_bucket", (("le", "+Inf"),))] == syncs
        assert first[("purelink_sync_seconds_sum", ())] > 0
        assert first[("purelink_stream_size_bytes", orders)] > 0
        assert (
            first[("purelink_store_size_bytes", ())]
            >= first[("purelink_stream_size_bytes", orders)]
        )
        assert first[("process_resident_memory_bytes", ())] > 0

        # a junk datagram is dropped and counted by reason
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as junk:
            junk.sendto(b"not a purelink datagram", ("127.0.0.1", serve.port))
        with purelink.connect(serve.url, stream="events") as link:
            link.queue(b"x")
            assert link.wait_stored(timeout=20)
            during = _scrape(port)
            assert during[("purelink_links", ())] == 1
        assert sum(v for (name, _), v in during.items() if name == "purelink_dropped_total") >= 1

        _ship(serve.url, "orders", 500)
        second = _scrape(port)
        assert second[("purelink_stream_records_stored_total", orders)] == 1500
        assert second[("purelink_stream_records_stored_total", (("stream", "events"),))] == 1
        assert second[("purelink_records_stored_total", ())] == 1501
        assert second[("purelink_syncs_total", ())] > syncs
        assert (
            second[("purelink_stream_stored_bytes_total", orders)]
            > first[("purelink_stream_stored_bytes_total", orders)]
        )


def _serve(args: list[str], tmp_path: Path, block: str = "") -> subprocess.CompletedProcess[str]:
    """`purelink serve ...` in a child, with `block` (Python) run before the CLI."""
    code = f"import sys\n{block}\nfrom purelink.cli import main\nsys.exit(main(sys.argv[1:]))"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return subprocess.run(
        [sys.executable, "-c", code, "serve", "--data", str(tmp_path / "d"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_metrics_without_prometheus_client_is_a_one_line_error_exit_1(tmp_path: Path) -> None:
    done = _serve(
        ["--udp", "127.0.0.1:0", "--metrics", "127.0.0.1:0"],
        tmp_path,
        block="sys.modules['prometheus_client'] = None  # as if not installed",
    )
    assert done.returncode == 1  # a missing extra, as for nats://
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "purelink[metrics]" in lines[0]
    assert "prometheus-client" in lines[0]


def test_metrics_on_a_taken_port_is_a_one_line_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _serve(["--udp", "127.0.0.1:0", "--metrics", f"127.0.0.1:{port}"], tmp_path)
    assert done.returncode == 1
    said = done.stderr.splitlines()
    errors = [line for line in said if line.startswith("purelink serve: error:")]
    assert len(errors) == 1, done.stderr
    assert "--metrics" in errors[0]
    assert "Traceback" not in done.stderr


def test_a_bad_metrics_address_is_a_usage_error(tmp_path: Path) -> None:
    done = _serve(["--metrics", "nonsense"], tmp_path)
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1


def test_link_collector_exports_link_and_handler_stats(tmp_path: Path) -> None:
    with purelink.Listener(tmp_path / "data", udp="127.0.0.1:0") as listener:
        assert listener.udp_address is not None
        url = "udp://%s:%d" % listener.udp_address
        with purelink.connect(url, stream="app") as link:
            handler = LinkHandler(url, "logs")
            registry = CollectorRegistry(auto_describe=True)
            registry.register(LinkCollector(link, handler))
            for i in range(100):
                link.queue(b"%d" % i)
            assert link.wait_stored(timeout=20)
            record = logging.makeLogRecord({"msg": "hello"})
            handler.handle(record)
            assert handler.wait_stored(10)
            samples = _parse(generate_latest(registry).decode())
            handler.close()
    producers = {
        dict(labels)["stream"]: dict(labels)["producer"] for _, labels in samples if labels
    }
    assert producers["app"].startswith("anonymous-") and producers["logs"].startswith("anonymous-")
    assert producers["app"] != producers["logs"]
    app = (("producer", producers["app"]), ("stream", "app"), ("url", url))
    logs = (("producer", producers["logs"]), ("stream", "logs"), ("url", url))
    assert samples[("purelink_link_records_queued_total", app)] == 100
    assert samples[("purelink_link_records_stored_total", app)] == 100
    assert samples[("purelink_link_records_unstored", app)] == 0
    assert samples[("purelink_link_datagrams_sent_total", app)] >= 1
    assert samples[("purelink_link_rtt_seconds", app)] > 0
    info = {  # the phase may have moved on since the scrape: not compared with stats()
        labels: value
        for (name, labels), value in samples.items()
        if name == "purelink_link_congestion_info" and ("stream", "app") in labels
    }
    assert list(info.values()) == [1]
    (labels,) = info
    assert dict(labels)["controller"] == "bbr"
    assert dict(labels)["state"] in ("startup", "drain", "probe_bw", "probe_rtt")
    # BBR keeps a bandwidth estimate and paces: a series each (the values move
    # with the link; stats() is compared with the controller in tests/protocol)
    assert ("purelink_link_bottleneck_bandwidth_bytes_per_second", app) in samples
    assert samples[("purelink_link_min_rtt_seconds", app)] > 0  # the handshake's at least
    assert ("purelink_link_pacing_rate_bytes_per_second", app) in samples
    assert samples[("purelink_link_competing", app)] == 0  # alone on loopback
    assert dict(labels)["cross_traffic"] == "none"
    assert samples[("purelink_link_records_stored_total", logs)] == 1
    assert samples[("purelink_log_records_dropped_total", logs)] == 0
    assert samples[("purelink_log_records_pending", logs)] == 0


def test_link_collector_leaves_out_what_a_tcp_link_cannot_see(tmp_path: Path) -> None:
    with purelink.Listener(tmp_path / "data", udp=None, tcp="127.0.0.1:0") as listener:
        assert listener.tcp_address is not None
        url = "tcp://%s:%d" % listener.tcp_address
        with purelink.connect(url, stream="app") as link:
            registry = CollectorRegistry(auto_describe=True)
            registry.register(LinkCollector(link))
            samples = _parse(generate_latest(registry).decode())
    (producer,) = {
        dict(labels)["producer"] for _, labels in samples if dict(labels).get("stream") == "app"
    }
    app = (("producer", producer), ("stream", "app"), ("url", url))
    info = (*app, ("controller", "kernel"), ("cross_traffic", ""), ("state", ""))
    assert samples[("purelink_link_congestion_info", tuple(sorted(info)))] == 1
    assert ("purelink_link_competing", app) not in samples
    assert samples[("purelink_link_cwnd_bytes", app)] > 0
    for name in ("bottleneck_bandwidth_bytes_per_second", "min_rtt_seconds"):
        assert (f"purelink_link_{name}", app) not in samples  # not measured: no series
    assert ("purelink_link_pacing_rate_bytes_per_second", app) not in samples


def test_link_collector_needs_a_link() -> None:
    with pytest.raises(TypeError):
        LinkCollector()


def test_listener_collector_counts_subscriptions_and_tcp_frames(tmp_path: Path) -> None:
    from purelink.metrics import ListenerCollector  # noqa: PLC0415

    with purelink.Listener(tmp_path / "data", udp=None, tcp="127.0.0.1:0") as listener:
        assert listener.tcp_address is not None
        url = "tcp://%s:%d" % listener.tcp_address
        registry = CollectorRegistry(auto_describe=True)
        registry.register(ListenerCollector(listener))
        _ship(url, "s", 10)
        with purelink.subscribe(url, "s", start=1, follow=True) as subscription:
            records = iter(subscription)
            assert next(records)[0] == 1  # the subscriber is being served now
            during = _parse(generate_latest(registry).decode())
        deadline = time.monotonic() + 20  # the listener sees the subscriber go, then frees it
        while True:
            after = _parse(generate_latest(registry).decode())
            if after[("purelink_subscriptions", ())] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.01)
    assert during[("purelink_subscriptions", ())] == 1
    assert during[("purelink_tcp_frames_received_total", ())] > 0
    assert during[("purelink_udp_datagrams_received_total", ())] == 0
    assert during[("purelink_stream_records_stored_total", (("stream", "s"),))] == 10
    assert after[("purelink_subscriptions", ())] == 0
