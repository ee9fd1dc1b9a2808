"""Test helpers shipped with purelink: fakes, not mocks.

`FakeClock`, `FakeNet` (a seeded terrible network), `MemoryStore` (the
store, in memory, behind the core's StoreView) and `Simulation`, which runs
senders against a listener core on virtual time with no sockets and no sleeps.
"""

from .fakes import FakeClock, FakeNet, MemoryStore, NetConfig
from .sim import SimLink, Simulation

__all__ = ["FakeClock", "FakeNet", "MemoryStore", "NetConfig", "SimLink", "Simulation"]
