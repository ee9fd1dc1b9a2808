"""The link's state machine: records in, datagrams out, answers in, timers.

Sans-IO in the manner of aioquic's QuicConnection: the driver hands in
records (`push`), datagrams (`receive_datagram`) and the time; it takes out
datagrams (`datagrams_to_send`), the next deadline (`get_timer`) and events
(`next_event`).  Nothing here touches a socket, a thread or a clock.

Layout: `Sender` is this file (the inputs, and the send path, which is hot:
written inline for the interpreter) on three bases, each a file that reads
on its own and works on the sender's own attributes (no call or lookup
through another object per datagram):

* sender_records.py: the records held until stored (`push`, `_release`);
* sender_session.py: the states, the handshake, reconnects and failure
  (`SenderState`, and the only legal moves between states);
* sender_answers.py: the ACK fed to recovery, congestion and pacing; the
  one timer, loss detection, resends and probes.

Configuration and counters: sender_config.py.

What it decides, and who decides it:

* how much may be in flight and how fast it goes out: the congestion
  controller (`congestion/`, injected: BBR or NewReno), through `cwnd` and
  `pacing_rate`; the sender keeps bytes in flight under min(cwnd, the
  listener's window) and releases them through a token bucket (`Pacer`,
  window.py) in bursts of one pacing quantum;
* what is lost, and when to probe: RACK-TLP (recovery.py), fed with the send
  time of the transmission each answer names (`largest_pn`), and with the
  retransmissions the listener reports it got twice (spurious losses);
* what goes in each datagram: packing.py; how large datagrams are: path MTU
  discovery (pmtu.py), which the ledger tells what each answer delivered and
  what was lost;
* what each answer delivered, for BBR's model: delivery-rate samples
  (`congestion/rate.py`), stamped on every datagram as it goes out.

Invariants:
* every record pushed stays in `_recs` until the listener says it is stored;
  a reconnect re-packs everything above the listener's `received` seq, so no
  record is lost to a listener restart and none is stored twice (the listener
  deduplicates by producer and seq);
* `stored` never goes backwards; if the listener ever reports less than it
  told before, the sender fails with kind "lost" (docs/reliability.md, 2.4 Resume);
* each datagram in flight remembers what it carried (a batch, or a byte range
  of a batch larger than one datagram: packing.py builds them) and is resolved
  acked or lost (aioquic's packet_builder/recovery); retransmissions resend
  the same batch bytes under a new packet number, so RTT samples are never
  ambiguous;
* bytes in flight change in the ledger's `sent` and `remove` only
  (recovery.py; zeroed with the flights when a session starts or ends);
* a timer is armed only while something is unstored or a handshake runs: an
  idle link sleeps.  A pacing deadline is a timer only while something is
  waiting to go out and the window has room.
"""

from __future__ import annotations

import zlib
from collections import deque
from typing import Final

from .. import native
from ..errors import ProtocolError
from . import wire
from .congestion import CongestionControl, create
from .events import Event
from .packing import Flight, Packer
from .pmtu import PathMtu
from .recovery import InFlight, RttEstimator
from .sender_answers import SenderAnswers
from .sender_config import SenderConfig, SenderStats
from .sender_session import SenderState
from .window import Pacer

__all__ = ["Sender", "SenderConfig", "SenderState", "SenderStats"]

_total_size = getattr(native.part("pack"), "total_size", None)
"""The compiled core's sum(map(len, datagrams)), or None (pure Python)."""

# datagrams a probe timeout sends (RFC 9002 section 6.2.4 allows two)
PROBE_DATAGRAMS: Final = 2


class Sender(SenderAnswers):
    """The sending side of one link."""

    def __init__(self, config: SenderConfig, cc: CongestionControl | None = None) -> None:
        if config.datagram_size < 128 or config.datagram_size > 65507:
            raise ValueError("datagram_size must be between 128 and 65507")
        wire.encode_hello(wire.Hello(0, config.stream, config.producer, 0, 0, b""))  # validates
        self.config = config
        self.stats = SenderStats()
        self.rtt = RttEstimator(max_rto=config.max_probe_interval)
        if cc is None:
            seed = zlib.crc32(f"{config.stream}/{config.producer}/{config.anonymous_id}".encode())
            cc = create(config.congestion, config.datagram_size, seed)
        self.flight = InFlight(cc, self.rtt, self.stats)
        """The datagrams in flight, loss detection and rate samples (recovery.py)."""
        self.pacer = Pacer(config.datagram_size)
        self._pmtu = PathMtu(config.datagram_size) if config.pmtu else None
        """The path's datagram size, probed (UDP links; None: datagram_size)."""
        self.flight.path = self._pmtu
        self._packer = Packer(config.datagram_size if self._pmtu is None else self._pmtu.size)
        self._events: deque[Event] = deque()
        super().__init__(config)

    # ------------------------------------------------------------ inputs
    def receive_datagram(self, data: bytes | memoryview, now: float) -> None:
        """Take one datagram from the listener.  Anything malformed, forged or
        stale is dropped and counted; nothing raises."""
        try:
            msg = wire.decode_datagram(data)
        except ProtocolError:
            self.stats.dropped += 1
            return
        if isinstance(msg, wire.Ack):
            if (
                self.state == SenderState.OPEN
                and msg.conn_id == self.conn_id
                and (msg.epoch == self.epoch)
            ):
                self._on_ack(msg, now)
            else:
                self.stats.dropped += 1
        elif isinstance(msg, wire.Retry):
            if self.state == SenderState.CONNECTING and msg.nonce == self._nonce:
                self._on_retry(msg, now)
            else:
                self.stats.dropped += 1
        elif isinstance(msg, wire.Accept):
            if self.state == SenderState.CONNECTING and msg.nonce == self._nonce:
                self._on_accept(msg, now)
            else:
                self.stats.dropped += 1
        elif isinstance(msg, wire.Refuse):
            self._on_refuse(msg, now)
        elif (
            isinstance(msg, wire.MtuAck)
            and self._pmtu is not None
            and self.state == SenderState.OPEN
            and msg.conn_id == self.conn_id
            and msg.epoch == self.epoch
        ):
            self._pmtu.on_probe_acked(msg.pn, msg.size, now)
            self._sync_size()
        else:
            self.stats.dropped += 1

    def on_send_error(self, size: int, now: float) -> None:
        """The kernel refused to send a datagram of `size` bytes as larger than
        the path (EMSGSIZE): a path MTU signal.  (The datagram is lost; loss
        detection resends its bytes, cut smaller if the path size dropped.)"""
        if self._pmtu is not None:
            self._pmtu.on_send_error(size, now)
            self._sync_size()

    def on_path_too_big(self, now: float) -> None:
        """A router said a datagram was too big for the path (an ICMP report the
        kernel passed on, without its size): the path MTU probe in flight failed."""
        if self._pmtu is not None and self.state == SenderState.OPEN:
            self._pmtu.on_too_big(now)
            self._sync_size()

    @property
    def datagram_size(self) -> int:
        """The largest datagram sent now (the path MTU's, at most datagram_size)."""
        return self._packer.size

    # ----------------------------------------------------------- outputs
    def next_event(self) -> Event | None:
        """The next event, or None."""
        return self._events.popleft() if self._events else None

    @property
    def cc(self) -> CongestionControl:
        """The congestion controller (injected, or made from config.congestion)."""
        return self.flight.cc

    @property
    def in_flight(self) -> int:
        """Bytes of datagrams in flight."""
        return self.flight.bytes

    @property
    def payload_bytes(self) -> int:
        """Bytes of records sent (first transmissions only)."""
        return self._packer.payload

    def datagrams_to_send(self, now: float) -> list[bytes]:
        """Datagrams to put on the wire now: at most config.burst of them, and at
        most one pacing quantum's worth."""
        out: list[bytes] = []
        if self._close_due:
            self._close_due = False
            out.append(wire.encode_close(self.conn_id, self.epoch))
            return out
        if self.state == SenderState.CONNECTING:
            return self._hello_datagrams(now, out)
        if self.state != SenderState.OPEN:
            return out
        probe = self._probe_due
        burst = self._paced_burst(now, probe)
        if burst < 0:
            return out
        window = self.window
        if probe:
            self._probe_due = False
            # a probe goes out whatever the window: two datagrams (RFC 9002 6.2.4),
            # so that one lost on a lossy path does not cost another probe interval
            window = max(window, self.flight.bytes + (PROBE_DATAGRAMS - 1) * self._packer.size + 1)
        self._fill(now, out, burst, window)
        if probe:
            self.stats.probes += 1
            if not out:
                out.extend(self._probe_datagrams(now))
        if self._pmtu is not None:
            self._path_probe(self._pmtu, now, out)
        self._sent(now, out, probe, window)
        return out

    def _paced_burst(self, now: float, probe: bool) -> int:
        """How many datagrams may go now: config.burst, fewer if the pacer allows
        less (a loss probe's two always); 0: only a path MTU probe may; -1: none."""
        burst = self.config.burst
        pacer = self.pacer
        if not pacer.rate:
            return burst
        allowed = pacer.allowance(now, self._window_held)
        if allowed > 0 or probe:
            floor = PROBE_DATAGRAMS if probe else 1
            return min(burst, max(floor, -(-int(allowed) // self._packer.size)))
        return -1 if self._pmtu is None else 0

    def _fill(self, now: float, out: list[bytes], burst: int, window: int) -> None:
        """Up to `burst` datagrams into `out`: repairs of lost ones first, then new
        batches (resent and packed ones go in flight)."""
        flight = self.flight
        packer = self._packer
        stats = self.stats
        new: dict[int, Flight] = {}
        # a repair fills a hole in what the listener holds, so only the cwnd
        # bounds it; the listener's window bounds new data (bounded by it too,
        # repairs crawled through a reorder buffer full of what waited behind
        # them: a window of 2 % of the bdp, 1.5 s to repair one overflow)
        repairs = max(flight.cc.cwnd, window)
        while len(out) < burst:
            if flight.lost and flight.bytes < repairs:
                f = flight.lost.popleft()
                if f.last <= self._received:
                    continue
                out.extend(self._resend(f, now, True))
            elif self._waiting and flight.bytes < window:
                pn, sent, held = self._pn, len(out), flight.bytes
                try:
                    # with stamps, each flight is stamped and filed in flight as it is made
                    stamps = flight.stamps(now)
                    self._pn, nbytes = packer.fill(
                        self._recs, self._lens, self._base, self.pushed, self._pn, now,
                        burst - len(out), window - flight.bytes, out,
                        new if stamps is None else flight.flights, stamps,
                    )  # fmt: skip
                    if stamps is None:
                        flight.sent_all(new, now)
                        new.clear()
                    else:
                        flight.stamped(nbytes, now)
                except BaseException:
                    # failed part-way (no memory, a bug): nothing of it goes out, and
                    # the ledger holds no flight it does not count
                    flight.unfile(pn, held)
                    del out[sent:]
                    self._pn = pn
                    raise
                stats.batches, stats.fragments = packer.batches, packer.pieces
                stats.payload = packer.payload
            else:
                break

    def _path_probe(self, pmtu: PathMtu, now: float, out: list[bytes]) -> None:
        """A path MTU probe, if one is due: outside the window, not a flight."""
        size = pmtu.next_probe(now)
        if size is not None:
            self._pn += 1
            pmtu.probe_sent(self._pn, size, now, min(self.rtt.rto, 1.0))
            out.append(wire.encode_probe(self.conn_id, self._pn, self.epoch, size))

    def _sent(self, now: float, out: list[bytes], probe: bool, window: int) -> None:
        """Account for what goes out: counters, the pacer, the timer, and whether
        the window or the application is what holds the link back."""
        flight = self.flight
        if out:
            nbytes = sum(map(len, out)) if _total_size is None else _total_size(out)
            stats = self.stats
            stats.datagrams += len(out)
            stats.bytes += nbytes
            if self.pacer.rate:
                self.pacer.spend(nbytes)
            self._last_sent = now
            if self._timer is None or probe:
                self._arm(now)
        waiting = bool(flight.lost) or self._waiting
        self._window_held = waiting and flight.bytes >= window
        if not waiting and flight.bytes < window:
            flight.rate.set_app_limited(flight.bytes)
