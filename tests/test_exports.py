"""Pins the public API (the README's Python API): names, error classes, signatures, counters.

Why it exists: tests outside the project call these names exactly so, and a
rename or a changed default is a breaking change that should fail here first,
loudly, rather than in a user's code (after trio's `_tests/test_exports.py`).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import pytest

import purelink

PUBLIC = {
    "Listener",
    "connect",
    "connect_async",
    "Store",
    "Error",
    "Full",
    "Fenced",
    "Closed",
    "ConnectError",
    "LinkError",
    "Link",
    "LinkStats",
    "ListenerStats",
    "subscribe",
}
# modules, loaded on first use: attributes, not in __all__ (`from purelink import *`
# must not bind `logging` over the standard library's)
MODULES = {"logging", "metrics"}
ERRORS = ["Full", "Fenced", "Closed", "ConnectError", "LinkError"]
POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def test_all_is_exactly_the_public_names() -> None:
    assert set(purelink.__all__) == PUBLIC
    assert len(purelink.__all__) == len(PUBLIC), "a name is listed twice"
    for name in PUBLIC | MODULES:
        assert getattr(purelink, name) is not None


def test_star_import_gives_the_public_names() -> None:
    namespace: dict[str, Any] = {}
    exec("from purelink import *", namespace)
    assert {k for k in namespace if not k.startswith("__")} == PUBLIC


def test_error_is_the_base_of_every_error() -> None:
    assert issubclass(purelink.Error, Exception)
    for name in ERRORS:
        cls = getattr(purelink, name)
        assert issubclass(cls, purelink.Error), name
        assert cls is not purelink.Error


def _params(func: Callable[..., Any]) -> list[inspect.Parameter]:
    params = list(inspect.signature(func).parameters.values())
    return params[1:] if params and params[0].name == "self" else params


def _check(
    func: Callable[..., Any], positional: int, named: dict[str, Any], required: tuple[str, ...] = ()
) -> None:
    """`func` takes `positional` leading positional parameters (names free), then
    the `named` keyword-callable parameters with exactly these defaults, and
    `required` keyword-callable parameters without a default."""
    params = _params(func)
    assert len(params) >= positional, f"{func.__qualname__}: too few parameters"
    for p in params[:positional]:
        assert p.kind in POSITIONAL, f"{func.__qualname__}: {p.name} must be positional"
        assert p.default is inspect.Parameter.empty, f"{func.__qualname__}: {p.name} is required"
    by_name = {p.name: p for p in params}
    for name, default in named.items():
        assert name in by_name, f"{func.__qualname__} has no parameter {name!r}"
        p = by_name[name]
        assert p.kind in NAMED, f"{func.__qualname__}: {name} must be callable by keyword"
        assert p.default == default, f"{func.__qualname__}: {name} defaults to {p.default!r}"
    for name in required:
        assert name in by_name, f"{func.__qualname__} has no parameter {name!r}"
        assert by_name[name].kind in NAMED


def test_connect_signature() -> None:
    _check(
        purelink.connect,
        positional=1,  # the URL
        named={
            "producer": None,
            "capacity": 1_000_000,
            "capacity_bytes": 256 << 20,
            "datagram_size": 1400,
            "timeout": 10.0,
            "secret": None,
            "key_id": None,
            "on_stored": None,
            "congestion": "bbr",
            "close_timeout": 30.0,
        },
        required=("stream",),
    )


def test_connect_async_takes_connects_arguments() -> None:
    assert inspect.iscoroutinefunction(purelink.connect_async)
    assert inspect.signature(purelink.connect_async) == inspect.signature(purelink.connect)


def test_listener_signature() -> None:
    _check(
        purelink.Listener,
        positional=1,  # the store directory
        named={
            "udp": "127.0.0.1:7400",
            "tcp": None,
            "sync": "batch",
            "secret": None,
            "replicas": 3,  # for a nats:// cluster
            "insecure": False,
        },
    )


@pytest.mark.parametrize("method", ["start", "close", "stats", "__enter__", "__exit__"])
def test_listener_methods(method: str) -> None:
    assert callable(getattr(purelink.Listener, method))


def test_listener_addresses_are_attributes() -> None:
    # properties or attributes set in __init__: either way, not methods
    for name in ("udp_address", "tcp_address"):
        attr = inspect.getattr_static(purelink.Listener, name, None)
        assert attr is None or isinstance(attr, property), name


def test_link_methods() -> None:
    link = purelink.Link
    _check(link.queue, positional=1, named={"seq": None})
    _check(link.wait_stored, positional=0, named={"seq": None, "timeout": None})
    _check(link.wait_stored_async, positional=0, named={"seq": None, "timeout": None})
    assert inspect.iscoroutinefunction(link.wait_stored_async)
    _check(link.close, positional=0, named={"timeout": None})
    assert _params(link.stats) == []
    assert callable(link.__enter__)
    assert callable(link.__exit__)
    assert inspect.iscoroutinefunction(link.__aenter__)
    assert inspect.iscoroutinefunction(link.__aexit__)


def test_link_counts_are_not_methods() -> None:
    for name in ("queued", "stored"):
        attr = inspect.getattr_static(purelink.Link, name, None)
        assert not callable(attr) or isinstance(attr, property), name


def test_store_methods() -> None:
    store = purelink.Store
    _check(store, positional=1, named={})  # the store directory
    assert _params(store.streams) == []
    _check(store.first, positional=1, named={})
    _check(store.last, positional=1, named={})
    _check(store.read, positional=1, named={"start": 1, "stop": None})
    _check(store.read, positional=1, named={"follow": False})


def test_subscribe_signature() -> None:  # docs/store.md
    _check(
        purelink.subscribe,
        positional=2,
        named={
            "start": 1,
            "follow": True,
            "secret": None,
            "key_id": None,
            "timeout": 10.0,
            "reconnect": 0.0,
        },
    )


def test_logging_and_metrics_are_modules_with_their_names() -> None:
    import logging  # noqa: PLC0415 -- the standard library's, to compare

    assert inspect.ismodule(purelink.logging)
    assert purelink.logging is not logging
    assert issubclass(purelink.logging.LinkHandler, logging.Handler)
    _check(
        purelink.logging.LinkHandler,
        positional=1,  # url
        named={
            "stream": "app-logs",
            "producer": None,
            "secret": None,
            "key_id": None,
            "formatter": None,
            "timeout": 5.0,
        },
        required=("capacity",),
    )
    assert callable(purelink.logging.decode)
    assert inspect.ismodule(purelink.metrics)
    _check(purelink.metrics.LinkCollector, positional=0, named={})


# Counters of docs/design.md (and what the CLI and the demo report).
LINK_COUNTERS = {"queued", "stored", "wakeups", "datagrams", "parks", "unparks"}
LISTENER_COUNTERS = {
    "datagrams",
    "recv_calls",
    "accepts",
    "sessions",
    "connections",
    "drains",
    "pool_hits",
    "pool_misses",
    "syncs",
    "records_stored",
    "batches_stored",
    "dropped",
}


@pytest.mark.parametrize(
    ("cls", "counters"),
    [("LinkStats", LINK_COUNTERS), ("ListenerStats", LISTENER_COUNTERS)],
)
def test_stats_are_dataclasses_with_the_counters(cls: str, counters: set[str]) -> None:
    stats = getattr(purelink, cls)
    assert dataclasses.is_dataclass(stats)
    names = {f.name for f in dataclasses.fields(stats)}
    missing = counters - names
    assert not missing, f"{cls} lacks {sorted(missing)}"
