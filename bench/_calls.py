"""`drain --calls`: how many Python-level calls each thread makes per datagram.

Why it exists: with the compiled core, the per-record work is C; what is left
in Python runs per datagram, per batch, per burst or per answer, and the
question "which Python work remains, and how much of it" is a count before it
is a time.  `CallCounter` is a profile function (`threading.setprofile`) that
counts, for the threads it is told about and only while it is switched on,
each call of a Python function and each call of a C function made from
Python code, by function.  C code calling C code is not seen (the compiled
core's own loops), nor is C code calling Python back (what it calls is: the
Python function's own entry is counted).

The hook slows every call it sees several times over: a run with it measures
the counts, not the time (`drain` says so under its table).
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

__all__ = ["CallCounter"]


class CallCounter:
    """Counts calls by thread role ("link", "listener") and function."""

    def __init__(self) -> None:
        self.on = False
        """Counting now (the hook is installed for the whole run, off outside its timed part)."""
        self.roles: dict[int, str] = {}
        """Thread ident -> the role its calls are counted under; other threads are not counted."""
        self.python: dict[str, Counter[str]] = {}
        """Role -> calls of Python functions, by "file:function"."""
        self.native: dict[str, Counter[str]] = {}
        """Role -> calls of C functions made from Python code, by qualified name."""

    def watch(self, **threads: threading.Thread | None) -> None:
        """Count these threads' calls, each under its keyword as role, and no
        other thread's (a thread of an earlier run may have left its ident to
        a new one)."""
        self.roles.clear()
        for role, thread in threads.items():
            if thread is None or thread.ident is None:
                raise ValueError(f"the {role} thread is not running")
            self.roles[thread.ident] = role
            self.python.setdefault(role, Counter())
            self.native.setdefault(role, Counter())

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self.on:
            return
        role = self.roles.get(threading.get_ident())
        if role is None:
            return
        if event == "call":
            code = frame.f_code
            self.python[role][f"{Path(code.co_filename).name}:{code.co_name}"] += 1
        elif event == "c_call":
            self.native[role][getattr(arg, "__qualname__", repr(arg))] += 1

    def totals(self) -> dict[str, int]:
        """{"<role>_py": Python calls, "<role>_c": C calls} of each role."""
        out: dict[str, int] = {}
        for role in self.python:
            out[f"{role}_py"] = sum(self.python[role].values())
            out[f"{role}_c"] = sum(self.native[role].values())
        return out

    def top(self, role: str, n: int = 6) -> str:
        """The role's `n` most called functions (Python and C), as one line."""
        both = Counter({**self.python.get(role, {})})
        both.update({f"{name} (C)": k for name, k in self.native.get(role, {}).items()})
        return ", ".join(f"{name} {k:,}" for name, k in both.most_common(n))
