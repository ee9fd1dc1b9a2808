"""Which implementation of the hot paths runs: the compiled core or pure Python.

Why: purelink's per-record and per-datagram work has two implementations, the
pure-Python one (the reference, and the fallback) and `purelink._speedups`,
an optional C extension that setup.py builds where a compiler works.  This
module decides once, at import, which one the process uses, and says so for
`purelink --version` and `stats()`:

* PURELINK_NO_EXTENSIONS set to anything but "" or "0" forces pure Python;
* otherwise the compiled core is used when it imports; when it does not (not
  built: no compiler, a free-threaded CPython, or built with the variable
  set), pure Python, and `reason` says why.

Each part of the compiled core (ring, pack, ledger, intake) is used only
where the extension defines it, so a module that uses one asks
`part("name")`, which gives the extension module or None.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Final

__all__ = ["COMPILED", "IMPLEMENTATION", "compiled", "part", "reason"]

FORCE_VARIABLE: Final = "PURELINK_NO_EXTENSIONS"


def _forced() -> bool:
    return os.environ.get(FORCE_VARIABLE, "") not in ("", "0")


def _load() -> tuple[ModuleType | None, str]:
    if _forced():
        return None, f"{FORCE_VARIABLE}={os.environ[FORCE_VARIABLE]}"
    try:
        return importlib.import_module("purelink._speedups"), ""
    except ImportError as e:
        return None, f"the compiled core is not built ({e})"


compiled, reason = _load()
"""The extension module, or None with the reason the pure-Python path runs."""

COMPILED: Final = compiled is not None

IMPLEMENTATION: Final = "compiled core" if COMPILED else "pure Python"
"""What `purelink --version` and `stats().implementation` say."""


def part(name: str) -> ModuleType | None:
    """The extension module if it is in use and has the part `name` (the
    attribute `has_<name>` that the part's C file sets), else None."""
    if compiled is not None and getattr(compiled, f"has_{name}", False):
        return compiled
    return None
