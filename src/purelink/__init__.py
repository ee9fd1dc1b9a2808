"""purelink: ship records from Python to durable storage and learn exactly which are stored.

Only the public names of SPEC section 3 live here.
"""

from __future__ import annotations

from .errors import Closed, ConnectError, Error, Fenced, Full, LinkError
from .link import Link, LinkStats, connect
from .listener import Listener, ListenerStats
from .store.store import Store
from .subscribe import subscribe

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
    "subscribe",
]

__version__ = "0.1.0"
