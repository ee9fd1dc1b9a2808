"""The listener core's state, in one place, and the few helpers every part uses.

Why it exists: `ListenerCore` (listener_core.py) is put together from parts
that each handle one concern -- sessions and fencing (core_sessions.py), the
handshake (core_handshake.py), batch intake (core_intake.py), answers and
durability (core_answers.py).  They all read and write one set of fields: the
fields are declared here, once, with what each one holds, so that no part
grows state the others cannot see.

Sessions.  A session's place in its life is one `SessionState`, changed
only by `CoreSessions._move` (core_sessions.py), which checks the move
against `MOVES` (after h11's _state.py; the sender's own table is in
sender_session.py) and keeps the collections that index sessions in step
with it:

    state     where the session is
    NEW       nowhere yet (a HELLO passed; `_move` registers it)
    WAITING   _conns, _hellos, producer.conn, _by_peer (proven), _accept_waiting
    OPEN      _conns, _hellos, producer.conn, _by_peer (proven), _ack_due (ack owed)
    FENCED    _gone (the newest `fenced_memory`), _spent (while its cookie is fresh)
    CLOSED    _gone, _spent

    NEW --ready--> OPEN --newer session--> FENCED
     |              '--CLOSE, expiry, disconnect, key revoked--> CLOSED
     '--records not yet durable--> WAITING --synced--> OPEN
                                      |--newer session--> FENCED
                                      '--expiry, disconnect, key revoked--> CLOSED

Any other move raises AssertionError: a bug in the core, never a peer's
doing (a peer's bad datagram is dropped and counted).  `_by_peer` is tidied
lazily (`has_session`, `disconnected`).  `ack_due` is the one flag a session
carries besides its state: an OPEN session owes an ACK, mirrored by
`_ack_due` so that the drain visits only those (the per-datagram fast paths
set both inline).  `proven` is not a state: it says how the session came
(over TCP) and never changes.

Memory.  `memory` (the bytes held out of order or being reassembled, across
all producers) is a running total, brought up to date only where a
producer's held bytes can change -- a "held" result, a "stored" result of a
producer that held something, a new session, a producer forgotten -- so the
check against `max_memory` costs O(1) per datagram, not O(producers).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from .core_parts import Address, Cookies, CoreConfig, CoreStats, ProducerTable
from .ratelimit import TokenBuckets
from .receiver import Producer, Write

__all__ = ["AMPLIFICATION", "MOVES", "CoreState", "Session", "SessionState"]

AMPLIFICATION: Final = 3
_NOT_JUNK: Final = frozenset(
    {"session_expired", "unknown_conn", "stale_epoch", "not_accepted", "disk_full", "stream_failed"}
)
"""Drop reasons a real link can cause: a session expired or fenced under it (its
next datagrams, up to the REFUSE, are `unknown_conn` or `stale_epoch`), a
DATA racing its ACCEPT, or a HELLO the listener refuses for now (its disk,
its store).  Every other reason means bytes no link sends."""


class SessionState(enum.Enum):
    """Where a session is in its life (the table of moves: `MOVES`)."""

    NEW = "new"
    """Made by a HELLO that passed every check; in no collection yet."""
    WAITING = "waiting"
    """Live; its ACCEPT waits until its producer's written records are durable."""
    OPEN = "open"
    """Live and accepted: its data is taken and its ACKs are sent."""
    FENCED = "fenced"
    """Ended: a newer session of its producer replaced it."""
    CLOSED = "closed"
    """Ended: it said CLOSE, expired, lost its connection or its key."""

    # its members are singletons compared by identity: hash them so too, in C
    # (Enum's own __hash__ is a Python call, two per move in `MOVES`, two moves
    # per short link)
    __hash__ = object.__hash__


MOVES: Final = frozenset(
    {
        (SessionState.NEW, SessionState.WAITING),
        (SessionState.NEW, SessionState.OPEN),
        (SessionState.WAITING, SessionState.OPEN),
        (SessionState.WAITING, SessionState.FENCED),
        (SessionState.WAITING, SessionState.CLOSED),
        (SessionState.OPEN, SessionState.FENCED),
        (SessionState.OPEN, SessionState.CLOSED),
    }
)
"""The legal moves of a session's state; `CoreSessions._move` refuses any other."""


@dataclass(eq=False, slots=True)
class Session:
    """One session: a producer's epoch at one address, and what it owes an answer.
    (Slots: one is made per connection of a short link, so no __dict__ for it.)"""

    conn_id: int
    addr: Address
    producer: Producer
    epoch: int
    nonce: int
    last_seen: float
    replay_until: float | None
    """Until when a replay of its HELLO could pass the cookie check (None: its HELLO
    had no cookie, over TCP)."""
    proven: bool
    """Its transport proved the address (TCP): nothing is lost on the way."""
    state: SessionState = SessionState.NEW
    """Changed only by `CoreSessions._move`."""
    ack_due: bool = False
    """It owes an ACK (then it is in the core's `_ack_due`)."""
    largest_pn: int = 0  # largest packet number of this session since its last answer
    ack_delay_from: float = 0.0  # when that packet arrived
    duplicates: list[int] = field(default_factory=list)  # pns that brought nothing new
    hold_until: float | None = None
    """An ACK held for a sync goes out by then at the latest (None: none held)."""


class CoreState:
    """The fields of a listener core and the helpers that only touch them."""

    def __init__(self, store: ProducerTable, config: CoreConfig | None = None) -> None:
        self.config = config or CoreConfig()
        self.store = store
        # several listeners may write the store at once (a JetStream cluster):
        # a producer's state is read again at each of its new sessions
        self._shared = bool(getattr(store, "shared", False))
        self.stats = CoreStats()
        self._cookies = Cookies(self.config.cookie_lifetime)
        self._conns: dict[int, Session] = {}
        self._gone: dict[int, Session] = {}  # fenced or closed sessions, oldest first
        self._producers: dict[tuple[str, int], Producer] = {}
        self._hellos: dict[tuple[Address, int], int] = {}  # (addr, nonce) -> conn_id
        self._writes: dict[str, list[Write]] = {}
        self._write_owners: dict[str, list[tuple[Producer, int]]] = {}
        self._full: set[str] = set()  # streams the store has no room for (core_answers.py)
        self._failed_streams: set[str] = set()  # streams the store failed on for good
        self._pending_sync: dict[str, deque[tuple[int, list[tuple[Producer, int]]]]] = {}
        self._out: list[tuple[bytes, Address]] = []
        self._ack_due: set[int] = set()
        self._hold_until: float | None = None  # the earliest hold_until of a held ACK
        self._finished: set[Address] = set()  # proven peers whose last session said CLOSE
        # anonymous producers whose link said CLOSE before its records were durable
        self._closed_unsynced: set[Producer] = set()
        self._accept_waiting: dict[str, list[Session]] = {}
        self._next_sweep = 0.0  # when the HELLO path next looks for idle sessions
        self._by_peer: dict[Address, list[int]] = {}  # proven peer -> its sessions' conn_ids
        self._spent: dict[tuple[Address, int], float] = {}  # ended (addr, nonce) -> fresh until
        self._memory = 0  # sum of p.memory over the producers in _holding
        self._holding: dict[Producer, int] = {}  # producers holding bytes -> their p.memory
        self._random = b""  # os.urandom bytes for new conn ids, read ahead (core_sessions.py)
        self._random_at = 0
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

    def _want_ack(self, conn: Session) -> None:
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
