"""A one-line progress bar on stderr for `purelink send` and `purelink demo`.

Why it exists: the README's command line asks for a progress bar when stderr is a
terminal, and a dependency (tqdm, rich) for twenty lines of `\\r` is not worth
its weight.  The bar draws only when the stream is a terminal, at most every
`interval` seconds, so calling `update` once per chunk of records costs one
clock read.  A pipe or a file never sees a control character.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]

_WIDTH = 28  # characters of the bar itself


def _rate(count: float) -> str:
    """A rate in 3 significant figures with a k/M suffix: 1234567 -> '1.23M'."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if count >= limit:
            return f"{count / limit:.3g}{suffix}"
    return f"{count:.0f}"


class Progress:
    """`label [#####.....]  45.0%  450,000/1,000,000  1.23M/s`, redrawn in place.

    With `total=None` (an input of unknown length) the bar is left out and the
    count and rate remain.  The rate counts from `since` (a `time.monotonic()`
    reading), by default from now.  `close` draws the final state and ends the line.
    """

    def __init__(
        self,
        label: str,
        total: int | None,
        *,
        unit: str = "records",
        stream: TextIO | None = None,
        interval: float = 0.1,
        since: float | None = None,
    ) -> None:
        self._stream = sys.stderr if stream is None else stream
        try:
            self.enabled = self._stream.isatty()
        except (AttributeError, ValueError):  # a replaced or closed stream
            self.enabled = False
        self._label = label
        self._total = total
        self._unit = unit
        self._interval = interval
        self._start = time.monotonic() if since is None else since  # rate counts from here
        self._next_draw = 0.0
        self._drawn = 0  # length of the last line drawn, to blank its tail

    def update(self, done: int, note: str = "") -> None:
        """Redraw if `interval` has passed since the last draw."""
        if not self.enabled:
            return
        now = time.monotonic()
        if now < self._next_draw:
            return
        self._next_draw = now + self._interval
        self._draw(done, now, note)

    def note(self, text: str) -> None:
        """Write `text` as a line of its own, terminal or not: over the bar, which
        the next `update` draws again below it."""
        if self.enabled and self._drawn:
            self._stream.write(f"\r{' ' * self._drawn}\r")
            self._drawn = 0
            self._next_draw = 0.0
        self._stream.write(f"{text}\n")
        self._stream.flush()

    def close(self, done: int, note: str = "") -> None:
        """Draw the final state and move to a new line (only if a bar was shown)."""
        if self.enabled:
            self._draw(done, time.monotonic(), note)
            self._stream.write("\n")
            self._stream.flush()
            self.enabled = False

    def _draw(self, done: int, now: float, note: str) -> None:
        elapsed = max(now - self._start, 1e-9)
        parts = [self._label]
        if self._total:
            frac = min(done / self._total, 1.0)
            filled = int(frac * _WIDTH)
            parts.append(f"[{'#' * filled}{'.' * (_WIDTH - filled)}] {frac * 100:5.1f}%")
            parts.append(f"{done:,}/{self._total:,}")
        else:
            parts.append(f"{done:,} {self._unit}")
        parts.append(f"{_rate(done / elapsed)}/s")
        if note:
            parts.append(note)
        line = "  ".join(parts)
        pad = " " * max(self._drawn - len(line), 0)
        self._drawn = len(line)
        self._stream.write(f"\r{line}{pad}")
        self._stream.flush()
