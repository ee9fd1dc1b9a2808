"""What `import purelink` loads, and the CRC-32C it loads without its package's cost.

Why it exists: a short-lived process that ships a few records (a job, a CLI
tool, a serverless function) pays for every module `import purelink` loads
(docs/performance.md, "short-lived processes": 131 -> 59 ms).  These tests
pin that the producer's import path stays lean -- no listener, store,
asyncio, package metadata or library search -- that the lazily loaded public
names still work, and that the CRC-32C loaded straight from the crc32c
package's extension is the package's own function, with a fallback that
works when that cannot be done.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys

import crc32c as crc32c_package
import pytest

import purelink
from purelink import _crc32c, primitives

# modules a producer-only process must not load (and what each costs it)
HEAVY = [
    "purelink.listener.listener",  # the listener, the store, the TCP and tail servers: ~40 ms
    "purelink.store.store",
    "asyncio",  # ~25 ms; imported by wait_stored_async when it runs
    "importlib.metadata",  # the crc32c package's own __init__ reads its version: ~20 ms
    "crc32c",  # that __init__ itself
    "ctypes.util",  # find_library spawns ldconfig
    "ipaddress",  # only the CLI's loopback check needs it
    "purelink.primitives.grace",
    "purelink.primitives.pool",
    "purelink.logging",  # loaded on first use of purelink.logging
    "purelink.metrics",
    "prometheus_client",
]


def _fresh_modules(code: str, *flags: str) -> set[str]:
    """sys.modules of a fresh interpreter (run with `flags`) after `code`."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    out = subprocess.run(
        [sys.executable, *flags, "-c", script],
        capture_output=True,
        check=True,
        timeout=60,
        env=env,
    )
    return set(json.loads(out.stdout.decode().splitlines()[-1]))


def test_import_purelink_loads_only_what_a_producer_needs() -> None:
    loaded = _fresh_modules("import purelink")
    assert "purelink.link.link" in loaded
    assert "purelink.subscribe" in loaded  # light, and its name is also its module's
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_the_lazy_names_load_on_first_use() -> None:
    loaded = _fresh_modules(
        "import purelink\n"
        "assert purelink.Listener.__name__ == 'Listener'\n"
        "assert purelink.Store.__name__ == 'Store'\n"
        "assert purelink.ListenerStats.__name__ == 'ListenerStats'\n"
        "assert callable(purelink.subscribe)"
    )
    assert {"purelink.listener.listener", "purelink.store.store"} <= loaded


def test_logging_and_metrics_load_on_first_use() -> None:
    loaded = _fresh_modules(
        "import purelink\n"
        "assert purelink.logging.LinkHandler.__name__ == 'LinkHandler'\n"
        "assert purelink.metrics.LinkCollector.__name__ == 'LinkCollector'\n"
        "import logging\n"
        "assert logging.Handler.__module__ == 'logging'  # the standard library's, untouched"
    )
    assert {"purelink.logging", "purelink.metrics"} <= loaded
    assert "prometheus_client" not in loaded  # only once a collector is made


def test_subscribe_stays_the_function_after_its_module_is_imported() -> None:
    import purelink.subscribe  # noqa: PLC0415 -- binds the module's name on the package

    assert callable(purelink.subscribe)
    assert purelink.subscribe.__name__ == "subscribe"


def test_unknown_names_are_attribute_errors() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        purelink.no_such_name  # noqa: B018
    with pytest.raises(AttributeError, match="no_such_name"):
        primitives.no_such_name  # noqa: B018
    assert {"Listener", "Store", "connect"} <= set(dir(purelink))
    assert {"GraceDomain", "BufferPool", "Wakeup"} <= set(dir(primitives))


def test_primitives_names_are_the_modules_own() -> None:
    from purelink.primitives import grace, pool  # noqa: PLC0415

    assert primitives.GraceDomain is grace.GraceDomain
    assert primitives.BufferPool is pool.BufferPool


def test_fast_crc32c_is_the_packages_function() -> None:
    rng = random.Random(7)
    for size in (0, 1, 9, 63, 64, 65, 1400, 65_536):
        data = rng.randbytes(size)
        assert _crc32c.crc32c(data) == crc32c_package.crc32c(data)
        assert _crc32c.crc32c(data, 12345) == crc32c_package.crc32c(data, 12345)
    assert _crc32c.crc32c(b"123456789") == 0xE3069283


def test_crc32c_is_loaded_without_the_package_in_a_fresh_process() -> None:
    """Fails the day the direct load stops working (a new layout of the package, a
    loader that refuses, a deprecation in the way it is done): the fallback would
    then import the package, and that is what this looks for."""
    loaded = _fresh_modules(
        "from purelink._crc32c import crc32c\nassert crc32c(b'123456789') == 0xE3069283",
        "-X",
        "dev",
        "-W",
        "error",
    )
    assert "crc32c" not in loaded
    assert "importlib.metadata" not in loaded


def test_crc32c_falls_back_to_the_plain_import(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(name: str, package: str | None = None) -> None:
        raise ImportError("a layout this loader does not know")

    monkeypatch.delitem(sys.modules, "crc32c")
    monkeypatch.setattr(importlib.util, "find_spec", broken)
    function = _crc32c._load()
    assert function(b"123456789") == 0xE3069283
    assert "crc32c" in sys.modules  # it came from the package itself


def test_crc32c_uses_the_package_when_it_is_already_imported() -> None:
    assert "crc32c" in sys.modules  # this file imported it
    assert _crc32c._load() is crc32c_package.crc32c


def test_a_blocked_crc32c_is_respected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "crc32c", None)  # the import deliberately blocked
    with pytest.raises(ImportError):
        _crc32c._load()
