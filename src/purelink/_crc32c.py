# CRC-32C for the wire and store formats, without the crc32c package's import cost.
#
# The `crc32c` package (the dependency named in the README) does its work in one C
# extension, `crc32c._crc32c`.  Its package `__init__` also reads its own version with
# importlib.metadata and imports its command line: `import crc32c` costs 45-70 ms
# (python -X importtime, medians, Python 3.11 to 3.13, 2 vCPUs), this module ~1 ms, and
# `import purelink` is paid by every short-lived process that ships a few records.  So
# the extension is loaded here straight from the package's directory (the package
# itself is found, not run), with importlib's public loaders only.  What this relies on
# is the package's layout -- one extension named `_crc32c` in the package's directory --
# and anything unexpected (the package already imported, another layout in a future
# release, a loader that will not do it) falls back to the plain import: the same
# function, only slower to import.  tests/test_imports.py fails the day the direct
# load stops working (it looks for the package's __init__ in a fresh `-W error`
# process), so the fallback is never taken silently here.

from __future__ import annotations

import sys
from collections.abc import Callable

__all__ = ["crc32c"]


def _load() -> Callable[..., int]:
    if "crc32c" not in sys.modules:  # imported already, or blocked (None): the plain way
        try:
            import importlib.machinery  # noqa: PLC0415 -- only here
            import importlib.util  # noqa: PLC0415 -- only here
            import os  # noqa: PLC0415 -- only here

            spec = importlib.util.find_spec("crc32c")  # finds the package, does not run it
            where = list(spec.submodule_search_locations or ()) if spec is not None else []
            for directory in where:
                for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                    path = os.path.join(directory, "_crc32c" + suffix)
                    if not os.path.exists(path):
                        continue
                    loader = importlib.machinery.ExtensionFileLoader("crc32c._crc32c", path)
                    ext = importlib.util.spec_from_file_location(
                        "crc32c._crc32c", path, loader=loader
                    )
                    if ext is None:
                        continue
                    module = importlib.util.module_from_spec(ext)
                    loader.exec_module(module)
                    function: Callable[..., int] = module.crc32c
                    if function(b"123456789") == 0xE3069283:  # the check value of CRC-32C
                        return function
        except Exception:
            pass
    from crc32c import crc32c as plain  # noqa: PLC0415 -- the fallback

    return plain


crc32c: Callable[..., int] = _load()
"""crc32c(data, value=0) -> int: CRC-32C (Castagnoli) of `data`, continuing from `value`."""
