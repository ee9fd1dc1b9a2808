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

import dataclasses
import itertools
import os
import platform
import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from purelink.link.link import Link, LinkStats
from purelink.logging import LinkHandler

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from purelink.listener.listener import Listener
    from purelink.listener.stats import ListenerStats

__all__ = ["INSTALL", "LinkCollector", "ListenerCollector", "available", "prometheus_core"]

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
    ("disk_full", "link_disk_full", "Refusals for now: the listener's disk had no room."),
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

# (field of ListenerStats, metric name, help): what an operator reads
_LISTENER_COUNTERS = (
    ("datagrams_udp", "udp_datagrams_received", "UDP datagrams received."),
    ("frames", "tcp_frames_received", "TCP frames received."),
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
    ("key_reloads", "key_reloads", "Key tables taken (SIGHUP reloads of serve's keys file)."),
    ("key_reload_failures", "key_reload_failures", "Key reloads that failed: old keys stay."),
)
# the listener's own workings, for whoever tunes it: under purelink_internal_
_INTERNAL_COUNTERS = (
    ("recv_calls", "recv_calls", "Receive system calls that returned data."),
    ("drains", "drains", "Readiness events drained."),
    ("accept_drains", "accept_drains", "Readiness events of the TCP listening socket."),
    ("mtu_probes", "mtu_probes", "Path MTU probes answered."),
    ("pool_hits", "pool_hits", "Receive buffers reused from the free list."),
    ("pool_misses", "pool_misses", "Receive buffers allocated (the free list was empty)."),
)
_LISTENER_GAUGES = (
    ("links", "links", "Link sessions open now."),
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


def prometheus_core() -> Any:
    """prometheus_client's metric families, or an ImportError that says what to install."""
    try:
        from prometheus_client import core  # noqa: PLC0415 -- optional
    except ImportError:
        raise ImportError(f"purelink.metrics needs prometheus-client: {INSTALL}") from None
    return core


class LinkCollector:
    """Exports `link.stats()` of one or more links (or LinkHandlers) at scrape time.

    ``prometheus_client.REGISTRY.register(LinkCollector(link))``; every series
    has the labels `stream`, `producer` and `url`, so each link is a series of
    its own: `producer` is a named link's producer, and "anonymous-N" for an
    anonymous one (N numbers the anonymous links of the process, the same in
    every collector).  A LinkHandler adds `purelink_log_records_dropped_total`
    and `purelink_log_records_pending`.  The congestion controller's name and
    phase, and what it believes shares the bottleneck, are the labels
    `controller`, `state` and `cross_traffic` of
    `purelink_link_congestion_info` (always 1).
    """

    def __init__(self, *links: Link | LinkHandler) -> None:
        if not links:
            raise TypeError("LinkCollector needs at least one link")
        self._core = prometheus_core()
        self._links = links

    def describe(self) -> list[Metric]:
        return list(self.collect())

    def collect(self) -> Iterator[Metric]:
        core = self._core
        labels = ["stream", "producer", "url"]
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
            values = [item.stream, _producer(item), item.url]
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
            "The congestion control (kernel: a tcp:// link's), its phase and what it"
            " believes shares the bottleneck, as labels.",
            labels=[*labels, "controller", "state", "cross_traffic"],
        )
        self.congestion = {
            field: core.GaugeMetricFamily(f"purelink_{name}", text, labels=labels)
            for field, name, text in _LINK_CONGESTION
        }

    def add(self, values: list[str], stats: LinkStats) -> None:
        self.unstored.add_metric(values, stats.queued - stats.stored)
        self.rtt.add_metric(values, stats.rtt)
        self.cwnd.add_metric(values, stats.cwnd)
        cross = stats.cross_traffic or ""
        self.info.add_metric([*values, stats.congestion, stats.congestion_state, cross], 1)
        for field, family in self.congestion.items():
            value = getattr(stats, field)
            if value is not None:  # not measured: no series, rather than a false 0
                family.add_metric(values, float(value))

    def families(self) -> Iterator[Metric]:
        yield from (self.unstored, self.rtt, self.cwnd, self.info)
        yield from self.congestion.values()


_ANONYMOUS: weakref.WeakKeyDictionary[Link | LinkHandler, int] = weakref.WeakKeyDictionary()
_anonymous_lock = threading.Lock()
_anonymous_numbers = itertools.count(1)


def _producer(item: Link | LinkHandler) -> str:
    """The `producer` label: the producer's name, or "anonymous-N", N given to
    each anonymous link (or handler) of the process the first time it is seen."""
    name = item.producer
    if name:
        return name
    with _anonymous_lock:
        number = _ANONYMOUS.get(item)
        if number is None:
            number = _ANONYMOUS[item] = next(_anonymous_numbers)
    return f"anonymous-{number}"


class ListenerCollector:
    """Exports a running listener's `stats()` and its store's size at scrape time."""

    def __init__(self, listener: Listener) -> None:
        self._core = prometheus_core()
        self._listener = listener

    def describe(self) -> list[Metric]:
        return list(self.collect())

    def collect(self) -> Iterator[Metric]:
        core = self._core
        stats = self._listener.stats()
        yield _build_info(core)
        yield from self._streams(core, stats)
        yield from self._received(core, stats)
        yield _dropped(core, stats.dropped)
        values = {f.name: getattr(stats, f.name) for f in dataclasses.fields(stats)}
        values["datagrams_udp"] = stats.datagrams - stats.frames
        for field, name, text in _LISTENER_COUNTERS:
            yield core.CounterMetricFamily(f"purelink_{name}", text, value=values[field])
        for field, name, text in _INTERNAL_COUNTERS:
            yield core.CounterMetricFamily(f"purelink_internal_{name}", text, value=values[field])
        for field, name, text in _LISTENER_GAUGES:
            yield core.GaugeMetricFamily(f"purelink_{name}", text, value=values[field])
        connections = core.GaugeMetricFamily(
            "purelink_tcp_connections",
            "TCP connections open now: of links (role=link) and of subscribers (role=subscriber).",
            labels=["role"],
        )
        connections.add_metric(["link"], stats.connections)
        connections.add_metric(["subscriber"], stats.tail_connections)
        yield connections
        yield self._histogram(core, stats.sync_seconds, stats.sync_seconds_sum)
        yield from self._store_size(core)

    @staticmethod
    def _streams(core: Any, stats: ListenerStats) -> Iterator[Metric]:
        """Per stream: records and bytes stored since start, positions, room."""
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
        yield from (records, sizes)
        first = core.GaugeMetricFamily(
            "purelink_stream_first_position",
            "Position of the first record retained (0 when empty): retention moves it.",
            labels=["stream"],
        )
        last = core.GaugeMetricFamily(
            "purelink_stream_last_position",
            "Position of the last record written (0 when empty).",
            labels=["stream"],
        )
        for stream, position in sorted(stats.stream_last.items()):
            first.add_metric([stream], stats.stream_first.get(stream, 0))
            last.add_metric([stream], position)
        yield from (first, last)
        no_room = core.GaugeMetricFamily(
            "purelink_stream_no_room",
            "1 while the store has no room for a stream (why: disk_full or min_free).",
            labels=["stream", "why"],
        )
        for stream, why in sorted(stats.no_room.items()):
            no_room.add_metric([stream, why], 1)
        yield no_room
        free = core.GaugeMetricFamily(
            "purelink_stream_free_bytes",
            "Bytes free on the file system of a stream, as last looked at.",
            labels=["stream"],
        )
        for stream, count in sorted(stats.free_bytes.items()):
            free.add_metric([stream], count)
        yield free

    @staticmethod
    def _received(core: Any, stats: ListenerStats) -> Iterator[Metric]:
        received = core.CounterMetricFamily(
            "purelink_received_bytes",
            "Bytes received: of UDP datagrams and of TCP frames.",
            labels=["transport"],
        )
        received.add_metric(["udp"], stats.bytes - stats.frame_bytes)
        received.add_metric(["tcp"], stats.frame_bytes)
        yield received

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


def _build_info(core: Any) -> Metric:
    from purelink import __version__  # noqa: PLC0415 -- the package, loaded by now

    info = core.GaugeMetricFamily(
        "purelink_build_info",
        "Always 1: the purelink version and the Python that runs it, as labels.",
        labels=["version", "python"],
    )
    info.add_metric([__version__, platform.python_version()], 1)
    built: Metric = info
    return built


def _dropped(core: Any, dropped: dict[str, int]) -> Metric:
    """Drops by reason: every reason the listener knows, from the start (at 0)."""
    from purelink.listener.stats import DROP_REASONS  # noqa: PLC0415 -- the listener's

    family = core.CounterMetricFamily(
        "purelink_dropped",
        "Datagrams, frames, connections and subscriptions dropped or refused, by reason.",
        labels=["reason"],
    )
    for reason in sorted(set(DROP_REASONS) | set(dropped)):
        family.add_metric([reason], dropped.get(reason, 0))
    counted: Metric = family
    return counted
