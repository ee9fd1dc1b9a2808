"""The paths benchmark's constants: the checkout, the transports and their ports,
what the programs run inside the namespaces are called.

Why a module of its own: the other modules of bench/paths/ share these, and this
one imports none of them, so the package has a bottom and no import circle
(the emulator, its self-test, the transfers and the plot all read the same
names without reaching up into the benchmark's main program).
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "CHECKOUT",
    "EMULATOR_MODULE",
    "PEERS_MODULE",
    "PORTS",
    "SERVE_READY",
    "TRANSPORTS",
]

CHECKOUT = Path(__file__).resolve().parents[2]
"""The checkout's root: where `python -m bench.paths....` runs (bench/paths/ is two below)."""
PEERS_MODULE = f"{__package__}.peers"
"""`python -m` this: the programs run inside the namespaces (peers.py); the
package's own name, so that an installed copy (purelink.bench.paths) runs its own."""
EMULATOR_MODULE = f"{__package__}.emu"
"""`python -m` this: the router process of the emulator (emu.py)."""
TRANSPORTS: dict[str, str] = {
    "bbr": "Linux TCP BBR",
    "cubic": "Linux TCP CUBIC",
    "tcp": "purelink tcp://",
    "udp": "purelink udp://",
}
"""Each transport the benchmark runs, by name: its label in tables and plots."""
PORTS = {"udp": 7400, "tcp": 7401, "plain": 7402}
"""Side B's ports: purelink serve's udp:// and tcp://, and plain TCP's receiver."""
SERVE_READY = "purelink listening"
"""The line `purelink serve` prints once it listens."""
