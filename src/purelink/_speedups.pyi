# The compiled core's names, for type checkers (src/speedups/*.c; purelink.native).
# One section per part; each part's C file sets has_<part> = True once it is built.

# crc32c.c
crc32c_hardware: int

def crc32c(data: bytes | bytearray | memoryview, value: int = 0, /) -> int: ...
def crc32c_portable(data: bytes | bytearray | memoryview, value: int = 0, /) -> int: ...

# ring.c
has_ring: int

class WakeFlag:
    """The wake-once flag and fds Wakeup (primitives/wakeup.py) is built on."""

    armed: bool
    writes: int
    _closed: bool
    _read_fd: int
    _write_fd: int

class HandOff:
    """The link's queue(), its grant and the ring's newest list (link.py, ring.py)."""

    _slots: tuple[list[bytes | None], int]
    _bytes_in: int
    _limit_bytes: int
    _small: int
    _wakeup: object
    @property
    def queued(self) -> int: ...
    @property
    def _grant_range(self) -> tuple[int, object]: ...
    def queue(self, record: bytes, seq: int | None = None) -> int: ...
    def _next_seq(self) -> int: ...
    def _new_grant(self, first: int, stop: int) -> None: ...

def ring_take(
    gens: tuple[tuple[int, list[bytes | None], int], ...], start: int, end: int, /
) -> list[bytes]: ...
def ring_lengths(records: list[bytes], /) -> bytes: ...
def ring_has(gens: tuple[tuple[int, list[bytes | None], int], ...], seq: int, /) -> bool: ...

# pack.c

# ledger.c

# intake.c
