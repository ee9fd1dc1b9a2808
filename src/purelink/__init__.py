"""purelink: ship records from Python to durable storage and learn exactly which are stored.

Only the public names of the README's Python API live here.  `Listener`, `ListenerStats`
and `Store`, and the modules `purelink.logging` and `purelink.metrics`, are
loaded on first use (PEP 562): a process that only ships records -- a job, a
CLI tool, a serverless function -- imports the link and not the listener and
the store (docs/performance.md, "short-lived processes").
"""

from __future__ import annotations

import importlib as _importlib
from typing import TYPE_CHECKING, Any

from .errors import Closed, ConnectError, Error, Fenced, Full, LinkError
from .link import Link, LinkStats, connect, connect_async
from .subscribe import subscribe

if TYPE_CHECKING:
    from . import logging as logging  # re-exported as attributes, not in __all__
    from . import metrics as metrics
    from .listener.listener import Listener
    from .listener.stats import ListenerStats
    from .store.store import Store

_LAZY = {
    "Listener": ".listener.listener",
    "ListenerStats": ".listener.stats",
    "Store": ".store.store",
}
# purelink.logging is not the standard library's: the modules are attributes, not in
# __all__, so `from purelink import *` never binds `logging` over the stdlib module
_MODULES = {"logging": ".logging", "metrics": ".metrics"}

__all__ = [
    "Closed",
    "ConnectError",
    "Error",
    "Fenced",
    "Full",
    "Link",
    "LinkError",
    "LinkStats",
    "Listener",
    "ListenerStats",
    "Store",
    "connect",
    "connect_async",
    "subscribe",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        if name in _MODULES:
            return _importlib.import_module(_MODULES[name], __name__)  # binds it here too
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_MODULES))
