# The compiled core's names, for type checkers (src/speedups/*.c; purelink.native).
# One section per part; each part's C file sets has_<part> = True once it is built.

# crc32c.c
crc32c_hardware: int

def crc32c(data: bytes | bytearray | memoryview, value: int = 0, /) -> int: ...
def crc32c_portable(data: bytes | bytearray | memoryview, value: int = 0, /) -> int: ...

# ring.c

# pack.c

# ledger.c

# intake.c
from collections.abc import Callable  # noqa: E402 - each part's names in its own section
from typing import Any  # noqa: E402

class Intake:
    """The listener's fast intake over a ListenerCore's state (core_intake.py)."""

    def __init__(self, batch_header: type, partial: type, open: object) -> None: ...
    def take(self, core: object, data: bytes | memoryview, addr: object, now: float, /) -> bool: ...
    def drain(
        self,
        core: object,
        fd: int,
        get: Callable[[], bytearray],
        put: Callable[[bytearray], None],
        used: list[bytearray],
        gro: bool,
        fast: bool,
        budget: int,
        now: float,
        fallback: Callable[[memoryview, Any, float], None],
        /,
    ) -> tuple[int, int, int]: ...

has_intake: int
