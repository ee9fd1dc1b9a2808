"""The listener core's state, in one place, and the few helpers every part uses.

Why it exists: `ListenerCore` (listener_core.py) is put together from parts
that each handle one concern -- sessions and fencing (core_sessions.py), the
handshake (core_handshake.py), batch intake (core_intake.py), answers and
durability (core_answers.py).  They all read and write one set of fields: the
fields are declared here, once, with what each one holds, so that no part
grows state the others cannot see.

Memory.  `memory` (the bytes held out of order or being reassembled, across
all producers) is a running total, brought up to date only where a
producer's held bytes can change -- a "held" result, a "stored" result of a
producer that held something, a new session, a producer forgotten -- so the
check against `max_memory` costs O(1) per datagram, not O(producers).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from .core_parts import Address, Cookies, CoreConfig, CoreStats, StoreView
from .ratelimit import TokenBuckets
from .receiver import Producer, Write

__all__ = ["AMPLIFICATION", "CoreState"]

AMPLIFICATION: Final = 3
_NOT_JUNK: Final = frozenset({"session_expired", "unknown_conn", "stale_epoch", "not_accepted"})
"""Drop reasons a real link can cause: a session expired or fenced under it (its
next datagrams, up to the REFUSE, are `unknown_conn` or `stale_epoch`), or a
DATA racing its ACCEPT.  Every other reason means bytes no link sends."""


@dataclass
class _Conn:
    """One session: a producer's epoch at one address, and what it owes an answer."""

    conn_id: int
    addr: Address
    producer: Producer
    epoch: int
    nonce: int
    accepted: bool = False
    ack_due: bool = False
    last_seen: float = 0.0
    fenced: bool = False
    replay_until: float = 0.0  # until when a replay of its HELLO could pass the cookie check
    largest_pn: int = 0  # largest packet number of this session since its last answer
    ack_delay_from: float = 0.0  # when that packet arrived
    duplicates: list[int] = field(default_factory=list)  # pns that brought nothing new
    proven: bool = False  # its transport proved the address (TCP): nothing is lost on the way
    hold_until: float = 0.0  # an ACK held for a sync goes out by then at the latest (0: none held)


class CoreState:
    """The fields of a listener core and the helpers that only touch them."""

    def __init__(self, store: StoreView, config: CoreConfig | None = None) -> None:
        self.config = config or CoreConfig()
        self.store = store
        # several listeners may write the store at once (a JetStream cluster):
        # a producer's state is read again at each of its new sessions
        self._shared = bool(getattr(store, "shared", False))
        self.stats = CoreStats()
        self._cookies = Cookies(self.config.cookie_lifetime)
        self._conns: dict[int, _Conn] = {}
        self._gone: dict[int, _Conn] = {}  # fenced or closed sessions, oldest first
        self._producers: dict[tuple[str, int], Producer] = {}
        self._hellos: dict[tuple[Address, int], int] = {}  # (addr, nonce) -> conn_id
        self._writes: dict[str, list[Write]] = {}
        self._write_owners: dict[str, list[tuple[Producer, int]]] = {}
        self._pending_sync: dict[str, deque[tuple[int, list[tuple[Producer, int]]]]] = {}
        self._out: list[tuple[bytes, Address]] = []
        self._ack_due: set[int] = set()
        self._hold_until = 0.0  # the earliest hold_until of a held ACK; 0: none held
        self._finished: set[Address] = set()  # proven peers whose last session said CLOSE
        # anonymous producers whose link said CLOSE before its records were durable
        self._closed_unsynced: set[Producer] = set()
        self._accept_waiting: dict[str, list[_Conn]] = {}
        self._next_sweep = 0.0  # when the HELLO path next looks for idle sessions
        self._by_peer: dict[Address, list[int]] = {}  # proven peer -> its sessions' conn_ids
        self._spent: dict[tuple[Address, int], float] = {}  # ended (addr, nonce) -> fresh until
        self._memory = 0  # sum of p.memory over the producers in _holding
        self._holding: dict[Producer, int] = {}  # producers holding bytes -> their p.memory
        self.junk = 0
        """Datagrams dropped for a reason no link gives (not one of `_NOT_JUNK`):
        a driver compares it before and after feeding a peer's datagrams, to
        tell a peer that is not a link."""
        cfg = self.config
        self._limiter = (
            TokenBuckets(cfg.handshake_rate, cfg.handshake_burst, cfg.handshake_sources)
            if cfg.handshake_rate > 0
            else None
        )

    @property
    def links(self) -> int:
        """Sessions open now."""
        return len(self._conns)

    @property
    def memory(self) -> int:
        """Bytes held out of order (or being reassembled) across all producers: a
        running total, O(1) (see the module header)."""
        return self._memory

    def producers(self) -> Iterable[Producer]:
        """Every producer in memory."""
        return self._producers.values()

    def _drop(self, reason: str) -> None:
        dropped = self.stats.dropped
        dropped[reason] = dropped.get(reason, 0) + 1
        if reason not in _NOT_JUNK:
            self.junk += 1

    def _send_unproven(self, data: bytes, addr: Address, received: int) -> None:
        """Send to an address that has not proven itself: never more than 3x what came."""
        if len(data) > AMPLIFICATION * received:
            self._drop("amplification_limit")
            return
        self._out.append((data, addr))

    def _want_ack(self, conn: _Conn) -> None:
        if not conn.ack_due:
            conn.ack_due = True
            self._ack_due.add(conn.conn_id)

    def _account(self, p: Producer) -> None:
        """Bring the running `memory` total up to date with what `p` holds now."""
        held = p.memory
        holding = self._holding
        before = holding.pop(p, 0)
        if held:
            holding[p] = held
        self._memory += held - before
