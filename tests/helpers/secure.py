"""Two plaintext endpoints in memory (`Pair`) and the datagrams the security
tests send them (the encrypted ones: tests/protocol/test_crypto.py)."""

from __future__ import annotations

from purelink.protocol import wire
from purelink.protocol.listener_core import CoreConfig, ListenerCore
from purelink.protocol.sender import Sender, SenderConfig, SenderState
from purelink.testing import MemoryStore

ADDR = ("127.0.0.1", 5000)


OTHER = ("127.0.0.2", 6000)


ANON = (1 << 63) | 4242


def hello(
    cookie: bytes = b"",
    nonce: int = 7,
    stream: str = "s",
    producer: str = "",
    pid: int = ANON,
) -> bytes:
    pid = 0 if producer else pid
    return wire.encode_hello(wire.Hello(nonce, stream, producer, pid, 1400, cookie))


def answers(core: ListenerCore, now: float = 100.0) -> list[tuple[wire.Message, object]]:
    return [(wire.decode_datagram(d), a) for d, a in core.datagrams_to_send(now)]


def handshake(
    core: ListenerCore, addr: tuple[str, int] = ADDR, now: float = 100.0, **kw: object
) -> wire.Accept:
    core.receive_datagram(hello(**kw), addr, now)  # type: ignore[arg-type]
    ((retry, _),) = answers(core, now)
    assert isinstance(retry, wire.Retry)
    core.receive_datagram(hello(cookie=retry.cookie, **kw), addr, now)  # type: ignore[arg-type]
    # the ACCEPT, and a REFUSE(fenced) to the session it replaces, if any
    (accept,) = [m for m, _ in answers(core, now) if isinstance(m, wire.Accept)]
    assert isinstance(accept, wire.Accept)
    return accept


# ------------------------------------------------ forged answers at a link
class Pair:
    """A sender and a listener core in memory, with a hand-moved clock."""

    def __init__(self, **core_kw: object) -> None:
        self.store = MemoryStore()
        self.core = ListenerCore(self.store, CoreConfig(**core_kw))  # type: ignore[arg-type]
        self.sender = Sender(SenderConfig(stream="s"))
        self.now = 100.0
        self.sender.connect(self.now)
        self.captured: list[bytes] = []  # every answer the listener sent, for replays

    def step(self) -> int:
        moved = 0
        for data in self.sender.datagrams_to_send(self.now):
            self.core.receive_datagram(data, ADDR, self.now)
            moved += 1
        for stream, writes in self.core.take_writes().items():
            self.core.written(stream, self.store.append(stream, writes))
            self.core.synced(stream, self.store.sync(stream))
        for data, addr in self.core.datagrams_to_send(self.now):
            assert addr == ADDR
            self.captured.append(data)
            self.sender.receive_datagram(data, self.now)
            moved += 1
        self.now += 0.001
        self.sender.handle_timer(self.now)
        return moved

    def settle(self, steps: int = 2000) -> None:
        """Step until the sender is open, everything is stored and nothing moves."""
        s = self.sender
        for _ in range(steps):
            if not self.step() and s.state == SenderState.OPEN and s.stored == s.pushed:
                return
        raise AssertionError("the pair did not settle")

    def events(self) -> list[object]:
        out: list[object] = []
        while (ev := self.sender.next_event()) is not None:
            out.append(ev)
        return out


def data(a: wire.Accept, pn: int, first: int, recs: list[bytes]) -> bytes:
    return wire.encode_data(a.conn_id, pn, wire.encode_batch(a.producer, a.epoch, first, recs))
