"""Stream and producer names: one rule (1-200 of [A-Za-z0-9._-], no leading '.'), in one place.

Why it exists: a name arrives from the network in every HELLO, and a stream
name becomes a folder under the data directory.  The listener core checks it
before it touches the store, the store checks it before it makes a folder,
the command line checks its arguments, the reader checks what it opens --
and they must agree to the character, or a name one of them lets through is
a path trick for the next.  So there is one pattern and one function, here
(in the sans-IO package, which the store already depends on for the wire
format), and everyone imports them.

The rule: 1 to 200 characters of ``[A-Za-z0-9._-]``, not starting with a
dot.  That excludes, by construction, ``/`` and ``\\`` (no path
separators), ``.`` and ``..`` (no parent or self), hidden files, NUL and
every other control character, whitespace and non-ASCII look-alikes.  It is
matched with `fullmatch` and `re.ASCII`, so a trailing newline never slips
through (`$` would allow one).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["NAME_RE", "is_valid_name", "validate_stream_name"]

NAME_RE: Final = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}", re.ASCII)
"""A stream (or producer) name, matched with fullmatch."""


def is_valid_name(name: object) -> bool:
    """Whether `name` is a str that follows the rule."""
    return isinstance(name, str) and NAME_RE.fullmatch(name) is not None


def validate_stream_name(name: str, what: str = "stream") -> str:
    """Return `name` if it is a valid stream name; raise ValueError (TypeError
    for a non-str) otherwise.  `what`: the kind of name the message says
    ("producer": the same rule)."""
    if not isinstance(name, str):
        raise TypeError(f"{what} name must be str, not {type(name).__name__}")
    if NAME_RE.fullmatch(name) is None:
        raise ValueError(
            f"bad {what} name {name[:40]!r}: use 1-200 characters of A-Z a-z 0-9 . _ -, "
            "not starting with '.'"
        )
    return name
