"""Test helpers shipped with purelink: fakes, not mocks.

`FakeClock`, `FakeNet` (a seeded terrible network), `MemoryStore` (the
store, in memory, behind the core's ProducerTable) and `Simulation`, which runs
senders against a listener core on virtual time with no sockets and no sleeps.
`Competitor` is a bulk TCP flow (Reno, CUBIC or BBR v1, as Linux runs them)
that `Simulation.add_competitor` puts on the same bottleneck as the links,
with its `TcpSink` beside the listener; `MSS` and `SEGMENT` are its payload
and wire bytes per segment; `purelink.testing.sharing` runs links and
flows through one bottleneck and measures the line share each took.
`PathModel` is the one model of a bad path's direction that FakeNet, the
loopback proxy of the live tests and the TUN path emulator all drive
(`NetConfig` says what it does, `seeded_rng` gives each direction its RNG).
Two modules are imported by name, not from here, as they start real
processes or bind sockets: `purelink.testing.nats` (`NatsCluster`, a
JetStream cluster of real `nats-server` processes, for the tests and the
benchmarks) and `purelink.testing.ports` (`free_ports`, loopback ports a
server can name without racing the kernel's ephemeral range).
"""

from .competitors import MSS, SEGMENT, Competitor, TcpSink
from .fakes import FakeClock, FakeNet, MemoryStore, NetConfig
from .pathmodel import PathModel, PathStats, seeded_rng
from .sim import SimLink, Simulation

__all__ = [
    "MSS",
    "SEGMENT",
    "Competitor",
    "FakeClock",
    "FakeNet",
    "MemoryStore",
    "NetConfig",
    "PathModel",
    "PathStats",
    "SimLink",
    "Simulation",
    "TcpSink",
    "seeded_rng",
]
