"""purelink.metrics: Prometheus collectors for a listener (`serve --metrics`) and for links.

Why it exists: the first thing an operator asks of a server is its metrics,
and Prometheus' text format is what their tools scrape.  Both collectors are
custom collectors that read `stats()` when a scrape comes (the counters the
listener and the link keep anyway), so no record pays anything for metrics.
prometheus-client is an optional dependency (`pip install 'purelink[metrics]'`):
it is imported when a collector is made, never by `import purelink`.

Names follow Prometheus' conventions: `_total` counters, base units
(seconds, bytes), labels for what varies (stream, reason, transport).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from purelink import _address
from purelink.errors import Error
from purelink.link.link import Link, LinkStats
from purelink.logging import LinkHandler

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import CollectorRegistry

    from purelink.listener.listener import Listener

__all__ = ["LinkCollector", "ListenerCollector", "MetricsServer", "available"]

INSTALL = "pip install 'purelink[metrics]'"

# (field of LinkStats, metric name, help); counters first, then gauges
_LINK_COUNTERS = (
    ("queued", "link_records_queued", "Last seq queued on the link."),
    ("stored", "link_records_stored", "Last seq the listener said is stored."),
    ("wakeups", "link_wakeups", "eventfd writes by queue() (the link thread was asleep)."),
    ("sleeps", "link_sleeps", "Times the link thread went to sleep."),
    ("datagrams", "link_datagrams_sent", "Datagrams (or TCP frames) sent."),
    ("bytes_sent", "link_sent_bytes", "Bytes of datagrams sent."),
    ("send_calls", "link_send_calls", "System calls that sent datagrams."),
    ("batches", "link_batches", "Batches packed (first transmissions)."),
    ("retransmits", "link_retransmits", "Datagrams sent again after a loss."),
    ("probes", "link_probes", "Probes sent because answers stopped."),
    ("acks", "link_acks", "Answers received from the listener."),
    ("reconnects", "link_reconnects", "New handshakes after a lost session."),
    ("parks", "link_parks", "Times a wait_stored() caller parked."),
    ("unparks", "link_unparks", "Times the link thread woke a parked waiter."),
    ("send_errors", "link_send_errors", "Datagrams the kernel refused to send."),
)

# (field of LinkStats, metric name, help): the congestion controller's view, a
# gauge each; a field that is None (not measured) leaves the link's series out
_LINK_CONGESTION = (
    ("btl_bw", "link_bottleneck_bandwidth_bytes_per_second", "Estimated bottleneck bandwidth."),
    ("min_rtt", "link_min_rtt_seconds", "Smallest round trip the congestion control has seen."),
    ("pacing_rate", "link_pacing_rate_bytes_per_second", "Rate at which datagrams are released."),
    ("competing", "link_competing", "1 if the link believes other traffic shares its bottleneck."),
)

# (field of ListenerStats, metric name, help)
_LISTENER_COUNTERS = (
    ("bytes", "received_bytes", "Bytes received (UDP datagrams and TCP frames)."),
    ("recv_calls", "recv_calls", "Receive system calls that returned data."),
    ("drains", "drains", "Readiness events drained."),
    ("accepts", "tcp_accepts", "TCP connections accepted."),
    ("sessions", "sessions", "Sessions accepted (handshakes completed)."),
    ("batches_stored", "batches_stored", "Batches appended to the store."),
    ("records_stored", "records_stored", "Records appended to the store."),
    ("syncs", "syncs", "fdatasync calls (group commits)."),
    ("duplicates", "duplicate_batches", "Batches received again and dropped (resends)."),
    ("held", "held_batches", "Batches held out of order."),
    ("retries", "retries", "Address proofs asked for (RETRY answers)."),
    ("fenced", "fenced_sessions", "Sessions fenced by a newer one."),
    ("acks", "acks_sent", "Answers sent to links."),
    ("pool_hits", "pool_hits", "Receive buffers reused from the free list."),
    ("pool_misses", "pool_misses", "Receive buffers allocated (the free list was empty)."),
)
_LISTENER_GAUGES = (
    ("links", "links", "Link sessions open now."),
    ("connections", "tcp_connections", "TCP connections open now."),
    ("subscribers", "subscriptions", "Subscriptions being served now."),
    ("memory", "reorder_memory_bytes", "Bytes held out of order across all links."),
)


def available() -> bool:
    """Whether prometheus-client can be imported."""
    try:
        import prometheus_client  # noqa: F401, PLC0415 -- optional
    except ImportError:
        return False
    return True


def _core() -> Any:
    """prometheus_client's metric families, or an ImportError that says what to install."""
    try:
        from prometheus_client import core  # noqa: PLC0415 -- optional
    except ImportError:
        raise ImportError(f"purelink.metrics needs prometheus-client: {INSTALL}") from None
    return core


class LinkCollector:
    """Exports `link.stats()` of one or more links (or LinkHandlers) at scrape time.

    ``prometheus_client.REGISTRY.register(LinkCollector(link))``; every series
    has the labels `stream` and `url`.  The congestion controller's name and
    phase are the labels `controller` and `state` of
    `purelink_link_congestion_info` (always 1).  A LinkHandler adds
    `purelink_log_records_dropped_total` and `purelink_log_records_pending`.
    """

    def __init__(self, *links: Link | LinkHandler) -> None:
        if not links:
            raise TypeError("LinkCollector needs at least one link")
        self._core = _core()
        self._links = links

    def describe(self) -> list[Metric]:
        return list(self.collect())

    def collect(self) -> Iterator[Metric]:
        core = self._core
        labels = ["stream", "url"]
        counters = {
            name: core.CounterMetricFamily(f"purelink_{name}", text, labels=labels)
            for _, name, text in _LINK_COUNTERS
        }
        gauges = _LinkGauges(core, labels)
        dropped = core.CounterMetricFamily(
            "purelink_log_records_dropped",
            "Log records a LinkHandler could not store (full link, closed, gave up).",
            labels=labels,
        )
        pending = core.GaugeMetricFamily(
            "purelink_log_records_pending",
            "Log records a LinkHandler holds, not on its link yet.",
            labels=labels,
        )
        handlers = False
        for item in self._links:
            values = [item.stream, item.url]
            if isinstance(item, LinkHandler):
                handlers = True
                dropped.add_metric(values, item.dropped)
                pending.add_metric(values, item.pending)
                if item.link is None:
                    continue
                link: Link = item.link
            else:
                link = item
            stats = link.stats()
            for field, name, _ in _LINK_COUNTERS:
                counters[name].add_metric(values, getattr(stats, field))
            gauges.add(values, stats)
        yield from counters.values()
        yield from gauges.families()
        if handlers:
            yield from (dropped, pending)


class _LinkGauges:
    """LinkCollector's gauges: what a link holds now, and its congestion control's view."""

    def __init__(self, core: Any, labels: list[str]) -> None:
        self.unstored = core.GaugeMetricFamily(
            "purelink_link_records_unstored", "Records queued, not yet stored.", labels=labels
        )
        self.rtt = core.GaugeMetricFamily(
            "purelink_link_rtt_seconds", "Smoothed round-trip time.", labels=labels
        )
        self.cwnd = core.GaugeMetricFamily(
            "purelink_link_cwnd_bytes", "Congestion window.", labels=labels
        )
        self.info = core.GaugeMetricFamily(
            "purelink_link_congestion_info",
            "The congestion control (kernel: a tcp:// link's) and its phase, as labels.",
            labels=[*labels, "controller", "state"],
        )
        self.congestion = {
            field: core.GaugeMetricFamily(f"purelink_{name}", text, labels=labels)
            for field, name, text in _LINK_CONGESTION
        }

    def add(self, values: list[str], stats: LinkStats) -> None:
        self.unstored.add_metric(values, stats.queued - stats.stored)
        self.rtt.add_metric(values, stats.rtt)
        self.cwnd.add_metric(values, stats.cwnd)
        self.info.add_metric([*values, stats.congestion, stats.congestion_state], 1)
        for field, family in self.congestion.items():
            value = getattr(stats, field)
            if value is not None:  # not measured: no series, rather than a false 0
                family.add_metric(values, float(value))

    def families(self) -> Iterator[Metric]:
        yield from (self.unstored, self.rtt, self.cwnd, self.info)
        yield from self.congestion.values()


class ListenerCollector:
    """Exports a running listener's `stats()` and its store's size at scrape time."""

    def __init__(self, listener: Listener) -> None:
        self._core = _core()
        self._listener = listener

    def describe(self) -> list[Metric]:
        return list(self.collect())

    def collect(self) -> Iterator[Metric]:
        core = self._core
        stats = self._listener.stats()
        records = core.CounterMetricFamily(
            "purelink_stream_records_stored",
            "Records stored since the listener started, per stream.",
            labels=["stream"],
        )
        sizes = core.CounterMetricFamily(
            "purelink_stream_stored_bytes",
            "Bytes of batches stored since the listener started, per stream.",
            labels=["stream"],
        )
        for stream, count in sorted(stats.stream_records.items()):
            records.add_metric([stream], count)
            sizes.add_metric([stream], stats.stream_bytes.get(stream, 0))
        yield records
        yield sizes
        received = core.CounterMetricFamily(
            "purelink_datagrams_received",
            "UDP datagrams and TCP frames received.",
            labels=["transport"],
        )
        received.add_metric(["udp"], stats.datagrams - stats.frames)
        received.add_metric(["tcp"], stats.frames)
        yield received
        dropped = core.CounterMetricFamily(
            "purelink_dropped",
            "Datagrams, frames and subscriptions dropped or refused, by reason.",
            labels=["reason"],
        )
        for reason, count in sorted(stats.dropped.items()):
            dropped.add_metric([reason], count)
        yield dropped
        for field, name, text in _LISTENER_COUNTERS:
            yield core.CounterMetricFamily(f"purelink_{name}", text, value=getattr(stats, field))
        for field, name, text in _LISTENER_GAUGES:
            yield core.GaugeMetricFamily(f"purelink_{name}", text, value=getattr(stats, field))
        yield self._histogram(core, stats.sync_seconds, stats.sync_seconds_sum)
        yield from self._store_size(core)

    @staticmethod
    def _histogram(core: Any, counts: tuple[int, ...], total: float) -> Metric:
        from purelink.listener.stats import SYNC_BUCKETS  # noqa: PLC0415 -- the listener's

        buckets: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*SYNC_BUCKETS, float("inf")), counts, strict=False):
            running += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
        if not buckets:
            buckets = [("+Inf", 0)]
        family: Metric = core.HistogramMetricFamily(
            "purelink_sync_seconds",
            "Time of each fdatasync (group commit).",
            buckets=buckets,
            sum_value=total,
        )
        return family

    def _store_size(self, core: Any) -> Iterator[Metric]:
        from purelink.store.format import STREAMS_DIR  # noqa: PLC0415 -- the listener's

        root = os.fspath(self._listener.path)
        streams_dir = os.path.join(root, STREAMS_DIR)
        per_stream = core.GaugeMetricFamily(
            "purelink_stream_size_bytes",
            "Bytes of the stream's files on disk (after retention).",
            labels=["stream"],
        )
        total = 0
        for folder, _dirs, files in os.walk(root):
            for name in files:
                try:
                    total += os.stat(os.path.join(folder, name)).st_size
                except OSError:  # removed by retention meanwhile
                    continue
        try:
            entries = sorted(os.scandir(streams_dir), key=lambda e: e.name)
        except OSError:
            entries = []
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                per_stream.add_metric([entry.name], _folder_bytes(entry.path))
        yield per_stream
        yield core.GaugeMetricFamily(
            "purelink_store_size_bytes", "Bytes of the store's files on disk.", value=total
        )


def _folder_bytes(path: str) -> int:
    size = 0
    try:
        entries = list(os.scandir(path))
    except OSError:
        return 0
    for entry in entries:
        try:
            if entry.is_file(follow_symlinks=False):
                size += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return size


class MetricsServer:
    """`/metrics` over HTTP for a listener: what `purelink serve --metrics` runs.

    The registry holds the listener's collector and prometheus-client's
    process collector (CPU seconds, memory, open files) and platform
    collector.  The HTTP server is prometheus-client's, on a thread of its own.
    """

    def __init__(self, listener: Listener, address: str) -> None:
        host, port = _address.parse_hostport(address)  # ValueError if malformed
        core = _core()
        from prometheus_client import (  # noqa: PLC0415 -- optional
            PlatformCollector,
            ProcessCollector,
            start_http_server,
        )

        self.registry: CollectorRegistry = core.CollectorRegistry(auto_describe=False)
        self.registry.register(ListenerCollector(listener))
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        try:
            self._httpd, self._thread = start_http_server(port, host, self.registry)
        except OSError as exc:
            shown = _address.format_hostport(host, port)
            raise Error(f"cannot serve --metrics on {shown}: {exc.strerror or exc}") from None
        bound = self._httpd.server_address
        self.address: tuple[str, int] = (str(bound[0]), int(bound[1]))
        """The bound (host, port)."""

    def close(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5.0)
