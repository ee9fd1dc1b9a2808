"""A fill that fails part-way leaves the sender's ledger as it was.

Why: the compiled packer files each flight in the ledger's ring as it makes it,
and the ledger's sent_all files a dict of them; an exception part-way (no
memory, a ring that refuses a packet number) would leave flights in the
ledger that its byte count never saw, so that acking or losing them later
would take away bytes never added.  The sender takes them out again and sends
nothing of the failed fill; this runs in both modes (compiled and pure).
"""

from __future__ import annotations

from typing import Any

import pytest

from purelink.protocol.listener_core import ListenerCore
from purelink.protocol.sender import Sender, SenderConfig, SenderState
from purelink.testing import MemoryStore

ADDR = ("10.0.0.1", 4000)


class Boom(MemoryError):
    """The failure injected."""


def _open_sender() -> Sender:
    sender = Sender(SenderConfig(stream="s"))
    core = ListenerCore(MemoryStore())
    sender.connect(100.0)
    now = 100.0
    for _ in range(2):  # HELLO -> RETRY, HELLO -> ACCEPT
        for data in sender.datagrams_to_send(now):
            core.receive_datagram(data, ADDR, now)
        for data, _ in core.datagrams_to_send(now):
            sender.receive_datagram(data, now)
    assert sender.state == SenderState.OPEN
    return sender


class FailingPacker:
    """The sender's packer, whose fill files what it makes and then fails."""

    def __init__(self, packer: Any) -> None:
        self._packer = packer

    def fill(self, *args: Any) -> Any:
        self._packer.fill(*args)
        raise Boom

    def __getattr__(self, name: str) -> Any:
        return getattr(self._packer, name)


@pytest.mark.parametrize("where", ["fill", "filing"])
def test_a_fill_that_fails_part_way_leaves_no_uncounted_flight(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sender = _open_sender()
    sender.push([bytes([i]) * 700 for i in range(200)])
    flight = sender.flight
    before = (sender._pn, flight.bytes, list(flight.flights.items()))
    if where == "fill":
        monkeypatch.setattr(sender, "_packer", FailingPacker(sender._packer))
    else:  # the ledger's filing fails once the flights are in (either way it files)
        for name in ("sent_all", "stamped"):
            real = getattr(flight, name)

            def failing(*args: Any, real: Any = real) -> None:
                real(*args)
                raise Boom

            monkeypatch.setattr(flight, name, failing)
    with pytest.raises(Boom):
        sender.datagrams_to_send(101.0)
    assert (sender._pn, flight.bytes, list(flight.flights.items())) == before
    assert flight.bytes == sum(f.size for f in flight.flights.values())
