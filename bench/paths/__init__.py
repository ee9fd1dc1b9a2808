"""`purelink bench paths`: goodput through emulated network paths (needs root).

Why a package: the benchmark is a path emulator, the programs that run on
either side of it, a spec language for paths, the emulator's self-test, the
transfers, the shared runs and the plots.  Its modules, from the bottom up
(each imports only those above it in this list, so there is no import circle):

    constants.py  the checkout, the transports and their ports (imports none of the others)
    model.py      the emulator's side of the path model: IP packets, ICMP, two directions
    spec.py       the named paths (BASE, PATHS, TORTURE) and `--path SPEC`
    peers.py      the programs run inside the namespaces (`python -m bench.paths.peers`)
    emu.py        the TUN path emulator between two network namespaces, and its router
    transfers.py  one Linux TCP or purelink transfer through it
    shared.py     `--shared`: purelink udp:// and Linux TCP flows through it together
    calibrate.py  `--shared`'s cells in virtual time beside the emulator's (python -m ...calibrate)
    selftest.py   the emulator's accuracy and CPU (`python -m bench.paths.selftest`)
    plot.py       docs/paths.png: the matrix above, `--shared` below (docs/paths.json)
    run.py        the matrix, the torture run and `--shared`: `main`

`python -m bench.paths ...` and `purelink bench paths ...` run `main`.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """The benchmark (run.py), imported only when it runs: the programs inside
    the namespaces (`python -m bench.paths.peers`) import this package too."""
    from .run import main as run  # noqa: PLC0415

    return run(argv)
