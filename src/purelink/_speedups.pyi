# The compiled core's names, for type checkers (src/speedups/*.c; purelink.native).
# One section per part; each part's C file sets has_<part> = True once it is built.

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

_L = TypeVar("_L", list[bytes], list[bytes | None])

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
def ring_take_lengths(
    gens: tuple[tuple[int, list[bytes | None], int], ...], start: int, end: int, /
) -> tuple[list[bytes], bytes]: ...
def records_bytes(records: list[bytes], lens: object, lo: int, hi: int, /) -> int: ...
def ring_has(gens: tuple[tuple[int, list[bytes | None], int], ...], seq: int, /) -> bool: ...
def untracked(records: _L, /) -> _L: ...

# pack.c
has_pack: int

class Flight:
    pn: int
    first: int
    last: int
    size: int
    sent: float
    data: bytes
    offset: int
    end: int
    retx: bool
    delivered: int
    delivered_time: float
    first_sent: float
    app_limited: bool
    def __init__(
        self,
        pn: int,
        first: int,
        last: int,
        size: int,
        sent: float,
        data: bytes,
        offset: int = 0,
        end: int = 0,
    ) -> None: ...

class Packer:
    conn_id: int
    producer_id: int
    epoch: int
    next_seq: int
    batches: int
    pieces: int
    payload: int
    size: int
    @property
    def open(self) -> bool: ...
    def __init__(self, size: int) -> None: ...
    def start(self, conn_id: int, producer_id: int, epoch: int, next_seq: int, /) -> None: ...
    def fill(
        self,
        recs: list[bytes],
        lens: object,
        base: int,
        pushed: int,
        pn: int,
        now: float,
        count: int,
        room: int,
        out: list[bytes],
        flights: dict[int, Flight] | Flights,
        stamps: tuple[int, float, float, bool] | None = None,
        /,
    ) -> tuple[int, int]: ...
    def resend(self, f: Flight, pn: int, now: float, /) -> tuple[int, list[Flight]]: ...

def gso_run(datagrams: list[bytes], i: int, limit: int, /) -> int: ...
def total_size(datagrams: list[bytes], /) -> int: ...
def send_run(
    fd: int, datagrams: list[bytes], i: int, j: int, segment: int, release: bool, /
) -> int: ...
def send_runs(
    fd: int, datagrams: list[bytes], max_segments: int, max_bytes: int, release: bool, /
) -> tuple[int, int, int]: ...

# flights.c: the ledger's flights by packet number, in a ring (packet numbers go in ascending)
has_flights: int

class Flights:
    def __init__(self) -> None: ...
    def __len__(self) -> int: ...
    def __contains__(self, pn: object) -> bool: ...
    def __getitem__(self, pn: int) -> Any: ...
    def __setitem__(self, pn: int, f: Any) -> None: ...
    def __delitem__(self, pn: int) -> None: ...
    def __iter__(self) -> Iterator[int]: ...
    def get(self, pn: int, default: Any = None, /) -> Any: ...
    def keys(self) -> list[int]: ...
    def values(self) -> list[Any]: ...
    def items(self) -> list[tuple[int, Any]]: ...
    def clear(self) -> None: ...

# ledger.c (each returns NotImplemented when it declines: recovery.py then runs its own loop)
has_ledger: int

def ledger_sent(
    new: dict[int, Flight],
    flights: dict[int, Flight] | Flights,
    bytes: int,
    delivered: int,
    delivered_time: float,
    first_sent: float,
    app_limited: bool,
    /,
) -> int | Any: ...
def ledger_acked(
    inflight: Any, ack: Any, received: int, all_received: bool, now: float, /
) -> list[Flight] | Any: ...
def ledger_lost(
    flights: dict[int, Flight] | Flights, reference: int, delay: float, now: float, /
) -> tuple[list[Flight], float | None] | Any: ...

# intake.c

class Intake:
    """The listener's fast intake over a ListenerCore's state (core_intake.py)."""

    def __init__(self, batch_header: type, partial: type, open: object) -> None: ...
    def take(self, core: object, data: bytes | memoryview, addr: object, now: float, /) -> bool:
        """The datagram taken by the fast path, or False: declined, nothing changed."""
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
    ) -> tuple[int, int, int]:
        """Receive until EAGAIN or `budget` receives: (receives, datagrams, bytes).
        A buffer any of whose datagrams went to `fallback` is appended to `used`
        (Python may keep views of it until the round's writes); the others go
        back with `put` at once."""
    def join_crc(self, a: int, b: int, n: int, tables: bool, /) -> int:
        """The CRC-32C of A B from a = crc(A), b = crc(B) and n = len(B), as the
        intake joins a batch's pieces (crcjoin.c; `tables`: through the shift
        tables made for n): for the tests."""

has_intake: int
