"""Senders and a listener core on virtual time, through a FakeNet.

The loop jumps from event to event (a datagram arriving, a sender's timer,
the store's next durability event), so a run that covers minutes of virtual
time takes well under a second and never sleeps.  The listener side does
what listener.py does, through the same backend-neutral `StorageDriver`
(storage.py): drain what arrived, hand the in-order batches to the store,
answer once per drain, and answer again when the store says what became
durable -- at the next group commit, every `sync_interval` (MemoryBackend),
or, given `replication=`, when a simulated replicated log's delayed, failing,
sometimes lost acknowledgements come (ReplicatedBackend; testing/backends.py).

Beside the links, `add_competitor` puts bulk TCP flows on the same path
(testing/competitors.py), each with its sink beside the listener: segments
go to "tcp:<n>", ACKs come back to "tcpack:<n>", and the flows take their
turns at sending with the links.  With no competitor a run is the run it
was before they existed, datagram for datagram.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..listener.storage import MinFree, StorageDriver
from ..protocol import events, wire
from ..protocol.keys import KeyTable
from ..protocol.listener_core import CoreConfig, ListenerCore
from ..protocol.sender import Sender, SenderConfig, SenderState
from .backends import MemoryBackend, ReplicatedBackend, Replication
from .competitors import WINDOW, Competitor
from .fakes import FakeClock, FakeNet, MemoryStore

if TYPE_CHECKING:
    from ..protocol.channel import RekeyPolicy

__all__ = ["SimLink", "Simulation"]

LISTENER = "listener"


@dataclass
class SimLink:
    """One link in the simulation: a Sender and the records it still has to push."""

    name: str
    sender: Sender
    todo: list[bytes]
    addr: tuple[str, int]
    push_every: int = 0
    """Push this many records per step (0: all at once)."""
    events: list[events.Event] = field(default_factory=list)
    told: int = 0

    @property
    def done(self) -> bool:
        """Everything pushed is stored, or the link ended."""
        s = self.sender
        if s.state in (SenderState.FENCED, SenderState.FAILED, SenderState.CLOSED):
            return True
        return not self.todo and s.stored == s.pushed and s.state == SenderState.OPEN


class Simulation:
    """A listener core, a MemoryStore and links, all on one FakeClock."""

    def __init__(
        self,
        net: FakeNet,
        *,
        sync_interval: float = 0.002,
        core_config: CoreConfig | None = None,
        clock: FakeClock | None = None,
        keys: KeyTable | None = None,
        rekey: RekeyPolicy | None = None,
        replication: Replication | None = None,
        disk: int | None = None,
        min_free: MinFree | None = None,
    ) -> None:
        self.clock = clock or FakeClock()
        self.keys = keys
        """With keys, the listener is a SecureCore and links may be given a secret."""
        self.wall = 1.7e9
        """The Unix time the listener's keys are checked against."""
        self.rekey = rekey
        """When the encrypted sessions' keys are updated (None: the defaults)."""
        self.net = net
        self.store = MemoryStore()
        self.backend: MemoryBackend | ReplicatedBackend = (
            MemoryBackend(self.store, self.clock, sync_interval, disk)
            if replication is None
            else ReplicatedBackend(self.store, self.clock, replication)
        )
        """The backend behind the storage driver; the core's ProducerTable is `store` itself."""
        self.core_config = core_config or CoreConfig()
        self.min_free = min_free or MinFree()
        self.core: ListenerCore | None = None
        self.driver: StorageDriver | None = None
        self._start_core()
        self.links: dict[tuple[str, int], SimLink] = {}
        self.competitors: list[Competitor] = []
        """TCP flows sharing the path with the links (`add_competitor`)."""
        self._routes: dict[str, Callable[[bytes, float], None]] = {}
        self._sink_timers: list[Callable[[float], None]] = []  # the competitors' receivers
        self.sync_interval = sync_interval
        self._port = 40000
        self.restarts = 0
        self.steps = 0

    def _start_core(self) -> None:
        core: ListenerCore
        if self.keys is None:
            core = ListenerCore(self.store, self.core_config)
        else:
            from ..protocol.secure_core import SecureCore  # noqa: PLC0415 - needs cryptography

            wall = lambda: self.wall  # noqa: E731 - the listener's Unix time, set by tests
            core = SecureCore(self.store, self.core_config, self.keys, wall, self.rekey)
        self.core = core
        self.driver = StorageDriver(core, self.backend, self.min_free, lambda: self.clock.now)

    def add_link(
        self,
        stream: str,
        records: list[bytes],
        *,
        producer: str = "",
        push_every: int = 0,
        datagram_size: int = 1400,
        anonymous_id: int = 0,
        congestion: str = "bbr",
        secret: bytes | None = None,
        key_id: str = "",
        pmtu: bool = False,
    ) -> SimLink:
        """A new link that connects now and pushes `records`."""
        self._port += 1
        cfg = SenderConfig(
            stream=stream,
            producer=producer,
            datagram_size=datagram_size,
            anonymous_id=anonymous_id,
            congestion=congestion,
            pmtu=pmtu,
        )
        if secret is None:
            sender = Sender(cfg)
        else:
            from ..protocol.secure_sender import SecureSender  # noqa: PLC0415

            sender = SecureSender(cfg, secret, key_id, self.rekey)
        sender.connect(self.clock.now)
        link = SimLink(
            f"link{self._port}", sender, list(records), ("10.0.0.1", self._port), push_every
        )
        self.links[link.addr] = link
        return link

    def add_competitor(
        self,
        kind: str,
        *,
        start: float | None = None,
        seed: int = 0,
        paced: bool | None = None,
        window: int = WINDOW,
    ) -> Competitor:
        """A bulk TCP flow of `kind` ("reno", "cubic", "bbr"; testing/competitors.py)
        from a host of its own beside the links, through the same path, to a sink
        beside the listener; it sends its SYN at `start` (None: now).  `paced`
        (None: as Linux by default) paces reno and cubic as the fq qdisc does;
        `window` is its receive window, segments."""
        n = len(self.competitors) + 1
        flow = Competitor(
            f"tcp:{n}",
            kind,
            start=self.clock.now if start is None else start,
            seed=seed,
            paced=paced,
            window=window,
        )
        net, sink, source, acks = self.net, flow.sink, (flow.name, 0), f"tcpack:{n}"

        def to_sink(data: bytes, now: float) -> None:
            ack = sink.receive(data, now)
            if ack is not None:
                net.send(ack, source, acks, now, up=False)

        def sink_timer(now: float) -> None:
            ack = sink.on_timer(now)
            if ack is not None:
                net.send(ack, source, acks, now, up=False)

        self._routes[flow.name] = to_sink
        self._routes[acks] = flow.receive_ack
        self._sink_timers.append(sink_timer)
        self.competitors.append(flow)
        return flow

    def restart_listener(self, *, crash: bool = True) -> None:
        """Kill the listener (losing what was not synced when `crash`) and start a new one."""
        if crash:
            self.backend.crash()
        else:
            self.backend.stop()  # a clean stop: everything handed over becomes durable
        self._start_core()
        self.restarts += 1

    def stop_listener(self) -> None:
        """The listener is down: datagrams to it vanish until restart_listener()."""
        self.backend.crash()
        self.core = None
        self.driver = None

    def _push(self, link: SimLink) -> None:
        s = link.sender
        if not link.todo or s.state != SenderState.OPEN:
            return
        n = link.push_every or len(link.todo)
        chunk, link.todo = link.todo[:n], link.todo[n:]
        s.push(chunk)

    def _flush_link(self, link: SimLink, now: float) -> None:
        for data in link.sender.datagrams_to_send(now):
            self.net.send(data, link.addr, LISTENER, now, up=True)
        self._collect(link)

    def _collect(self, link: SimLink) -> None:
        while (ev := link.sender.next_event()) is not None:
            link.events.append(ev)
            if isinstance(ev, events.StoredAdvanced):
                link.told = ev.stored

    def _flush_listener(self, now: float) -> None:
        core, driver = self.core, self.driver
        if core is None or driver is None:
            return
        driver.write()
        driver.take_events()  # durable at once (sync_interval 0)
        # The core answers sessions in the order of a set of random conn ids; sort by
        # address so that the network's RNG meets the answers in the same order on
        # every run, and a seed is the same run each time (a failing seed reproduces).
        for data, addr in sorted(core.datagrams_to_send(now), key=lambda item: item[1]):
            self.net.send(data, ("listener", 0), addr[0] + ":" + str(addr[1]), now, up=False)

    def step(self) -> bool:
        """Run the next thing due; False when nothing is left to do."""
        self.steps += 1
        now = self.clock.now
        self._send(now)
        # the driver's next look at the disk's room (it may have answers to give)
        due_room = self.driver.check(now) if self.driver is not None else None
        due = self._next_due(now, due_room)
        if due is None:
            return False
        self.clock.now = due
        routes = self._routes
        for dest, data, source in self.net.deliver(due):
            if dest == LISTENER:
                if self.core is not None:
                    self.core.receive_datagram(data, source, due)
            elif (route := routes.get(dest)) is not None:
                route(data, due)
            else:
                host, port = dest.rsplit(":", 1)
                target = self.links.get((host, int(port)))
                if target is not None:
                    target.sender.receive_datagram(data, due)
        if self.driver is not None:
            self.backend.advance(due)
            self.driver.take_events()
        self._flush_listener(due)
        for link in self.links.values():
            link.sender.handle_timer(due)
            self._collect(link)
        for flow in self.competitors:
            flow.on_timer(due)
        for sink_timer in self._sink_timers:
            sink_timer(due)
        return True

    def _send(self, now: float) -> None:
        """What every sender has to send at `now`.  They take turns at going first:
        at a full bottleneck queue the first to send at an instant gets the slot
        that just freed, and a fixed order would hand it to the same sender every
        time (a real path has no such order)."""
        senders: list[SimLink | Competitor] = [*self.links.values(), *self.competitors]
        turn = self.steps % len(senders) if senders else 0
        for sender in senders[turn:] + senders[:turn]:
            if isinstance(sender, SimLink):
                self._push(sender)
                self._flush_link(sender, now)
                continue
            out = sender.datagrams_to_send(now)
            if out:
                send, source, name = self.net.send, (sender.name, 0), sender.name
                for data in out:
                    send(data, source, name, now, True)

    def _next_due(self, now: float, due_room: float | None) -> float | None:
        """The next time anything is due (never before `now`), or None;
        `due_room` is when the storage driver looks at the disk's room again."""
        due = self.net.next_due()
        for t in (self.backend.next_due(), due_room):
            if t is not None and (due is None or t < due):
                due = t
        for link in self.links.values():
            t = link.sender.get_timer()
            if t is not None and (due is None or t < due):
                due = t
        for flow in self.competitors:
            t = flow.next_timer()
            if t is not None and (due is None or t < due):
                due = t
            t = flow.sink.next_timer()
            if t is not None and (due is None or t < due):
                due = t
        return None if due is None else max(due, now)

    def run(
        self, until: Callable[[], bool], *, max_time: float = 600.0, max_steps: int = 5_000_000
    ) -> bool:
        """Step until `until()` holds; False if virtual time or steps run out."""
        deadline = self.clock.now + max_time
        for _ in range(max_steps):
            if until():
                return True
            if self.clock.now > deadline or not self.step():
                return until()
        return until()

    def all_done(self) -> bool:
        """Every link finished."""
        return all(link.done for link in self.links.values())

    def arrived(self, link: SimLink) -> int:
        """Payload bytes of a link that reached the listener: written, or held out of
        order (the link's own "stored" lags by an answer, and a gap holds back
        everything behind it until its repair arrives).  What the congestion
        tests and the ccsweep benchmark measure goodput by."""
        pid = link.sender.producer_id
        assert self.core is not None
        held = sum(
            h.length - wire.BATCH_HEADER - 2 * h.count
            for p in self.core.producers()
            if p.pid == pid
            for _, h in p.held.values()
        )
        return self.store.written.get(pid, 0) + held
