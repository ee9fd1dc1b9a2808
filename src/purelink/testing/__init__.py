"""Test helpers shipped with purelink: fakes, not mocks.

`FakeClock`, `FakeNet` (a seeded terrible network), `MemoryStore` (the
store, in memory, behind the core's StoreView) and `Simulation`, which runs
senders against a listener core on virtual time with no sockets and no sleeps.
`PathModel` is the one model of a bad path's direction that FakeNet, the
loopback proxy of the live tests and the TUN path emulator all drive
(`NetConfig` says what it does, `seeded_rng` gives each direction its RNG).
"""

from .fakes import FakeClock, FakeNet, MemoryStore, NetConfig
from .pathmodel import PathModel, PathStats, seeded_rng
from .sim import SimLink, Simulation

__all__ = [
    "FakeClock",
    "FakeNet",
    "MemoryStore",
    "NetConfig",
    "PathModel",
    "PathStats",
    "SimLink",
    "Simulation",
    "seeded_rng",
]
