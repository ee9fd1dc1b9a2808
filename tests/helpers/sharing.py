"""The table of shares quoted when purelink's controller changes.

Why it exists: the competitor tests (sim/test_competitors.py) and this table
measure the way purelink.testing.sharing measures (re-exported here): each
flow's **line share** of a FakeNet path from `warm` to the end, the wire
bytes that carried the unique payload it got through, over rate x time.
The wider sweep over paths, seeds and competitors is bench/ccshare.py.

    python tests/helpers/sharing.py     # the table: cubic alone and in pairs, a purelink
                                        # link beside cubic and beside bbr, bbr beside cubic
"""

from __future__ import annotations

import time

from purelink.testing.sharing import PURELINK, Shared, path, share

__all__ = ["PURELINK", "Shared", "path", "share", "table"]

TABLE_RUNS = [
    ("cubic alone", ["cubic"]),
    ("cubic + cubic", ["cubic", "cubic"]),
    ("purelink-bbr + cubic", [PURELINK, "cubic"]),
    ("purelink-bbr + bbr", [PURELINK, "bbr"]),
    ("bbr + cubic", ["bbr", "cubic"]),
]
TABLE_BUFFERS = (0.5, 1.0, 2.5, 10.0)
TABLE_COLUMNS = ("buffer", "first", "second", "pair", "part", "real s")


def table(mbit: float = 20, rtt: float = 0.04, seconds: float = 40.0, warm: float = 10.0) -> None:
    """Print the line shares of TABLE_RUNS at each of TABLE_BUFFERS, the first
    flow's part of the pair, and the real time each run took."""
    print(f"{mbit:g} Mbit/s, {rtt * 1e3:g} ms: line shares from {warm:g} s to {seconds:g} s")
    print(f"{'flows':22}" + "".join(f"{h:>8}" for h in TABLE_COLUMNS))
    for name, kinds in TABLE_RUNS:
        for buffer in TABLE_BUFFERS:
            began = time.perf_counter()
            run = share(kinds, mbit=mbit, rtt=rtt, buffer=buffer, seconds=seconds, warm=warm)
            took = time.perf_counter() - began
            second = f"{run.shares[1]:8.2f}" if len(kinds) > 1 else " " * 8
            print(
                f"{name:22}{buffer:8g}{run.shares[0]:8.2f}{second}{run.total:8.2f}"
                f"{run.share(0):8.2f}{took:8.1f}"
            )


if __name__ == "__main__":
    table()
