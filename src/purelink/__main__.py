"""`python -m purelink`: the same command line as the `purelink` script.

Why it exists: it works without the console script on PATH (a bare checkout,
a venv that is not activated), and `purelink demo` starts its listener child
this way, with the very interpreter that runs the demo.
"""

from __future__ import annotations

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
