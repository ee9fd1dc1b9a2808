"""Records that say whose they are, the exactly-once check, and the figures log.

Why it exists: the end-to-end tests (system/test_reliability.py, system/test_crash.py,
listener/test_limits.py) ship records through real processes and read the store back
with the public `purelink.Store`, which gives positions and payloads only.
So each payload carries its link's tag and its index on that link, and its
bytes follow from those two; one reader then checks every promise of guarantee 1
(docs/reliability.md) at once: byte-exact, once, in seq order per link, positions
contiguous, no record (and no stream) that no link sent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import purelink


def payload(tag: str, i: int) -> bytes:
    """Record i (from 0) of link `tag`; its length varies from 0 to 96 bytes of body."""
    head = b"%s:%d:" % (tag.encode(), i)
    return head + bytes((i * 7 + k) & 0xFF for k in range(i % 97))


def check_stream(
    data: Path, stream: str, told: dict[str, int], *, exact: bool = False
) -> dict[str, int]:
    """Read `stream` and check it: positions 1..n; for each tag, records
    0..k-1 once each, in order, byte-exact, with k >= told[tag] (k ==
    told[tag] when `exact`); no tag that is not in `told`.  Returns k per tag."""
    rows = list(purelink.Store(data).read(stream))
    assert [p for p, _ in rows] == list(range(1, len(rows) + 1)), "positions are contiguous"
    seen: dict[str, list[int]] = {}
    for position, record in rows:
        raw_tag, i, _ = record.split(b":", 2)
        name = raw_tag.decode()
        assert record == payload(name, int(i)), f"position {position}: not byte-exact"
        seen.setdefault(name, []).append(int(i))
    assert set(seen) <= set(told), f"records no link sent: {sorted(set(seen) - set(told))}"
    counts = {}
    for tag, least in told.items():
        got = seen.get(tag, [])
        assert got == list(range(len(got))), f"{tag}: each record once, in seq order"
        assert len(got) >= least, f"{tag}: told {least} stored, {len(got)} in the store"
        if exact:
            assert len(got) == least, f"{tag}: {len(got)} stored, {least} shipped"
        counts[tag] = len(got)
    return counts


def report(test: str, figures: dict[str, Any]) -> None:
    """Append one run's figures as a JSON line to $PURELINK_FIGURES, if set
    (docs/reliability.md quotes them)."""
    path = os.environ.get("PURELINK_FIGURES")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"test": test, **figures}, sort_keys=True, default=str) + "\n")


def summarize(path: str) -> dict[str, Any]:
    """Totals of a $PURELINK_FIGURES file, by test: runs, seeds, records,
    faults by kind, kills.  `python tests/helpers/shipping.py FILE` prints them."""
    totals: dict[str, dict[str, Any]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            into = totals.setdefault(row.pop("test"), {"runs": 0})
            into["runs"] += 1
            row.pop("seed", None)
            _add(into, row)
    return totals


def _add(into: dict[str, Any], row: dict[str, Any]) -> None:
    for key, value in row.items():
        if isinstance(value, dict):
            _add(into.setdefault(key, {}), value)
        elif isinstance(value, bool) or not isinstance(value, int | float):
            into[key] = value
        elif key in ("bound", "per_link", "peak_memory", "rss_before", "rss_after", "links"):
            into[key] = max(into.get(key, 0), value)  # a level, not a count
        else:
            into[key] = into.get(key, 0) + value


if __name__ == "__main__":
    import sys

    print(json.dumps(summarize(sys.argv[1]), indent=1, sort_keys=True))
