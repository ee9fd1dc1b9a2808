"""An anonymous link is never fenced by an epoch of its own that it never heard of.

Why it exists: a listener that grants an anonymous link's HELLO a new epoch
keeps it in memory only (an anonymous producer's epochs are not made
durable), but a segment that rolls before the ACCEPT reaches the link writes
that epoch into its `.sum` summary -- with no owner.  If the listener is then
killed, the next one recovers the epoch from the summary, and the link's
HELLO, which names the epoch it last heard of, looks older than the newest
session: it must still be let in.  An anonymous producer's id is its link
instance's own (random, 63 bits), so every epoch of it went to that link.
`tests/system/test_crash.py::test_sigkill_while_shipping` found this under load.
"""

from __future__ import annotations

from pathlib import Path

from purelink.listener.backends.file import DataDirProducers
from purelink.protocol import wire
from purelink.protocol.listener_core import ListenerCore
from purelink.store import DataDir

ADDR = ("127.0.0.1", 5000)
ANON = (1 << 63) | 4242
OTHER = (1 << 63) | 777


def handshake(core: ListenerCore, nonce: int, epoch: int, now: float = 100.0) -> wire.Message:
    """HELLO, RETRY, HELLO with the cookie: what the listener answers the last."""
    core.receive_datagram(
        wire.encode_hello(wire.Hello(nonce, "s", "", ANON, 1400, b"", epoch)), ADDR, now
    )
    ((data, _),) = core.datagrams_to_send(now)
    retry = wire.decode_datagram(data)
    assert isinstance(retry, wire.Retry)
    hello = wire.Hello(nonce, "s", "", ANON, 1400, retry.cookie, epoch)
    core.receive_datagram(wire.encode_hello(hello), ADDR, now)
    answers = [wire.decode_datagram(d) for d, a in core.datagrams_to_send(now) if a == ADDR]
    # (a REFUSE(fenced) to the session this one replaces has nonce 0)
    (answer,) = [
        m for m in answers if isinstance(m, wire.Accept | wire.Refuse) and m.nonce == nonce
    ]
    return answer


def test_a_rolled_summarys_epoch_does_not_fence_the_anonymous_link(tmp_path: Path) -> None:
    with DataDir(tmp_path, segment_bytes=4096) as data:
        core = ListenerCore(DataDirProducers(data, set()))
        first = handshake(core, nonce=1, epoch=0)
        assert isinstance(first, wire.Accept) and first.epoch == 1
        lost = handshake(core, nonce=2, epoch=1)  # the link reconnects; this ACCEPT is lost
        assert isinstance(lost, wire.Accept) and lost.epoch == 2
        log = data.stream("s")
        for seq in range(1, 40):  # another link's records roll the segment: a summary
            raw = wire.encode_batch(OTHER, 1, seq, [b"x" * 200])
            log.append([(raw, wire.verify_batch(raw))])
        assert len(log.segments) > 1
    # the listener is killed; the next one recovers the epoch from the summary
    with DataDir(tmp_path, segment_bytes=4096) as data:
        recovered = data.stream("s").producers[ANON]
        assert (recovered.epoch, recovered.owner) == (2, 0)  # what made the link look stale
        core = ListenerCore(DataDirProducers(data, set()))
        again = handshake(core, nonce=3, epoch=1)  # the epoch the link last heard of
        assert isinstance(again, wire.Accept), again
        assert again.epoch == 3
        assert core.stats.dropped.get("stale_epoch", 0) == 0
