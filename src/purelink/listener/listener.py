"""Listener: sockets, the drain loop, the protocol core, the store.

One thread runs the loop (with a data directory and sync="batch", a second
does the fdatasyncs: backends/file.py).  The loop:

1. sleeps in epoll on the UDP socket and the sync thread's eventfd (no timer:
   an idle listener burns nothing);
2. on readiness drains the socket until EAGAIN (mechanism 3), within a
   budget of receive calls so that a flood cannot starve answers, each
   receive into a buffer from an O(1) free list (mechanism 4); with UDP GRO
   one receive may hold many datagrams of one sender, split by the segment
   size the kernel reports;
3. hands every datagram to the sans-IO `ListenerCore`, and the batches now
   in order to the store through the backend-neutral `StorageDriver`
   (storage.py: one append per stream per drain), then returns the buffers;
4. answers: one ACK per link per drain.

The TCP side (tcp.py) plugs into the same loop: it is handed the loop (its
sources and answer routes), the core, the buffer pool and the round's buffers.
What the listener is told is checked once, by `ListenerConfig` (config.py).

The store is a data directory (backends/file.py: fdatasync, group commit)
or a JetStream cluster (backends/jetstream.py: a quorum's PubAck).  Either
says what became durable as events on a deque and an eventfd write; the loop
hands them to the core, and answers "stored" (docs/reliability.md, guarantee 2).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from .. import _address
from .._udp import SOL_UDP, UDP_GRO
from ..errors import Error
from ..primitives.pool import BufferPool
from ..protocol.core_parts import ProducerTable
from ..protocol.keys import KeyTable
from ..protocol.listener_core import ListenerCore
from ..store.datadir import DataDir, validate_stream_name
from ..store.retention import RetentionPolicy
from .backends.file import FileBackend
from .backends.jetstream import JetStreamBackend
from .config import DEFAULT_MIN_FREE, ListenerConfig
from .health import store_problem
from .stats import ListenerStats, SyncTimes
from .storage import StorageDriver
from .tail.file import FileTailSource
from .tail.server import TailServer
from .tail.source import TailSource
from .tcp import TCP_PREFIX, TcpServer

__all__ = ["Listener", "ListenerStats"]

log = logging.getLogger("purelink.listener")

SO_RCVBUFFORCE: Final = getattr(socket, "SO_RCVBUFFORCE", 33)
RECV_BUFFER: Final = 65536
DRAIN_BUDGET: Final = 512
SOCKET_BUFFER: Final = 32 << 20
_CMSG_SPACE: Final = socket.CMSG_SPACE(4)
CLOSE_DRAIN: Final = 10.0
"""Seconds close() waits for JetStream to acknowledge what was published."""


class Listener:
    """Receives links' datagrams and stores their records durably."""

    error: BaseException | None = None
    """What stopped the loop, if it died (it should not)."""

    _started = _closed = _stop = False  # start() was called; close() was; the loop must end
    # what start() makes (and close() lets go): None (or no descriptor) until then
    udp_address: tuple[str, int] | None = None
    tcp_address: tuple[str, int] | None = None
    _data: DataDir | None = None
    _files: FileBackend | None = None
    _jetstream: JetStreamBackend | None = None
    _core: ListenerCore | None = None
    _driver: StorageDriver | None = None
    _tcp: TcpServer | None = None
    _tail: TailServer | None = None
    _sock: socket.socket | None = None
    _thread: threading.Thread | None = None
    _epoll: select.epoll | None = None
    _wake_fd = -1
    _synced_fd = -1  # the store's events are waiting (backends/)
    _polling = False  # the loop sleeps in epoll, or is about to: the store must wake it
    _failure_r = _failure_w = -1  # readable once a thread of ours died (failure_fd)

    def __init__(
        self,
        data: str | os.PathLike[str],
        udp: str | None = "127.0.0.1:7400",
        tcp: str | None = None,
        sync: str = "batch",
        secret: bytes | None = None,
        *,
        segment_bytes: int = 64 << 20,
        retain_bytes: int | None = None,
        retain_age: float | None = None,
        retention: Mapping[str, tuple[int | None, float | None]] | None = None,
        max_links: int = 100_000,
        max_streams: int = 10_000,
        max_record: int = 16 << 20,
        max_reorder: int = 4 << 20,
        max_memory: int = 1 << 30,
        handshake_rate: float = 1000.0,
        handshake_burst: float = 2000.0,
        max_connections: int = 10_000,
        read_timeout: float = 10.0,
        keys: KeyTable | None = None,
        max_subscriptions: int = 64,
        insecure: bool = False,
        replicas: int = 3,
        min_free: int | str = DEFAULT_MIN_FREE,
    ) -> None:
        # every argument checked, each limit within its bounds (config.py)
        config = ListenerConfig(
            store=data,
            udp=udp,
            tcp=tcp,
            sync=sync,
            keys=keys,
            insecure=insecure,
            segment_bytes=segment_bytes,
            retain_bytes=retain_bytes,
            retain_age=retain_age,
            retention=retention or {},
            max_links=max_links,
            max_streams=max_streams,
            max_record=max_record,
            max_reorder=max_reorder,
            max_memory=max_memory,
            handshake_rate=handshake_rate,
            handshake_burst=handshake_burst,
            max_connections=max_connections,
            read_timeout=read_timeout,
            max_subscriptions=max_subscriptions,
            replicas=replicas,
            secret=secret,
            min_free=min_free,
        )
        self._config = config
        self.path = Path(data)
        self.sync = sync
        self._keys = config.keys  # with keys every datagram is encrypted (protocol/secure_core.py)
        # key tables handed to the loop by set_keys(), each with the event it sets
        self._new_keys: deque[tuple[KeyTable, threading.Event]] = deque()
        # per-stream retention (store/retention.py), which set_retention() adds to
        self._retention = dict(config.retention)
        self._core_config = config.core_config()
        self._pool = BufferPool(RECV_BUFFER, 1024)
        self._gro = False
        self._rcvbuf = 0
        self._recv_calls = 0
        self._drains = 0
        self._datagrams = 0
        self._bytes = 0
        self._key_reloads = 0
        self._key_reload_failures = 0
        self._handlers: dict[int, Callable[[float, int], None]] = {}
        self._round_buffers: list[bytearray] = []  # the round's datagrams are in them
        self.routes: dict[Any, Callable[[bytes], None]] = {}
        """Where answers to an address go when it is not a UDP peer (e.g. a TCP
        connection's frame writer), keyed by the address the core knows it by."""

    # -------------------------------------------------------------- control
    def start(self) -> None:
        """Recover the store, bind the sockets, start the threads; returns when ready."""
        if self._started:
            raise Error("the listener was started already")
        self._started = True
        # the store's events (durable tickets, fenced producers) wake the loop here
        self._synced_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        synced_fd = self._synced_fd

        def wake() -> None:
            # only a loop that sleeps in epoll (or is about to) is woken, once: a busy
            # one takes the store's events at the end of its round anyway, and looks
            # at them once more after it says it sleeps (`_loop`), so no event waits
            # for a wakeup that never comes (mechanism 1, as a link's queue() wakes
            # its thread)
            if self._polling:
                self._polling = False
                with contextlib.suppress(OSError):  # closed at shutdown
                    os.eventfd_write(synced_fd, 1)

        try:
            self._open_store(wake)
            self._open_sockets()
        except BaseException:
            self._release()
            raise
        self._thread = threading.Thread(target=self._run, name="purelink-listener", daemon=True)
        self._thread.start()
        if self._files is not None:
            self._files.start(wake, lambda exc: self._died(exc, "sync thread"))

    def _open_store(self, wake: Callable[[], None]) -> None:
        """Open (recover) the store, and the core and storage driver over it."""
        config = self._config
        url = config.jetstream_url  # a JetStream cluster where a directory goes
        if url is not None:
            self._jetstream = JetStreamBackend(
                url, replicas=config.replicas, max_streams=config.max_streams
            )
            self._jetstream.start(wake)
        else:
            self._data = DataDir(
                self.path,
                segment_bytes=config.segment_bytes,
                max_streams=config.max_streams,
                retain_bytes=config.retain_bytes,
                retain_age=config.retain_age,
                retention=self._retention,
            )
            self._files = FileBackend(self._data, self.sync)
        store: ProducerTable = self._files.producers if self._files is not None else self.jetstream
        if self._keys is None:
            self._core = ListenerCore(store, self._core_config)
        else:  # cryptography is imported only here
            from ..protocol.secure_core import SecureCore  # noqa: PLC0415

            self._core = SecureCore(store, self._core_config, self._keys, time.time)
        self._driver = StorageDriver(
            self._core,
            self._files if self._files is not None else self.jetstream,
            config.min_free_mark(),
        )

    def _open_sockets(self) -> None:
        """Bind UDP and TCP, and poll them with the wakeups in one epoll."""
        config = self._config
        if config.udp is not None:
            self._sock = self._bind_udp(*_address.parse_hostport(config.udp))
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._epoll = select.epoll()
        self._epoll.register(self._wake_fd, select.EPOLLIN)
        # edge-triggered: every write of the store's wakeup is an edge of its own
        # (an eventfd reports each write), and the loop takes the store's events
        # every round anyway, so the count is never read back: one system call
        # less per sync (docs/performance.md, connections)
        self._epoll.register(self._synced_fd, select.EPOLLIN | select.EPOLLET)
        if self._sock is not None:
            self.add_source(self._sock.fileno(), self._drain)
        if config.tcp is not None:
            assert self._core is not None and self._driver is not None
            self._tcp = TcpServer(
                self,
                self._core,
                *_address.parse_hostport(config.tcp),
                pool=self._pool,
                round_buffers=self._round_buffers,
                max_connections=config.max_connections,
                read_timeout=config.read_timeout,
            )
            self.tcp_address = self._tcp.start()
            self._tail = TailServer(
                self._tail_source(),
                keys=self._keys,
                max_subscribers=config.max_subscriptions,
                hold=self._driver.hold,
            )
            self._driver.on_hold = self._tail.held_changed  # followers hear of a hold
            self._tcp.foreign = self._tail.take  # subscriptions share the TCP port

    def _tail_source(self) -> TailSource:
        """Where subscriptions read from: the data directory, or the cluster."""
        if self._data is not None:
            return FileTailSource(self._data, sync=self.sync)
        assert self._config.jetstream_url is not None
        from .tail.jetstream import JetStreamTailSource  # noqa: PLC0415 -- nats-py, on use

        return JetStreamTailSource(self.jetstream.nats)  # one connection serves both

    @property
    def jetstream(self) -> JetStreamBackend:
        """The JetStream backend (a listener started on a nats:// URL)."""
        assert self._jetstream is not None
        return self._jetstream

    def close(self) -> None:
        """Stop, write and sync everything received, close the files.  Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop = True
        if self._wake_fd >= 0:
            os.eventfd_write(self._wake_fd, 1)
        try:
            if self._thread is not None:
                self._thread.join()
            if self._jetstream is not None and not self._jetstream.drain(CLOSE_DRAIN):
                log.error("JetStream did not acknowledge everything before close")
            if self._files is not None:  # its sync thread stops, every stream is synced
                self._files.close()
        finally:
            self._release()  # whatever happened, the files, sockets and lock are let go

    def _release(self) -> None:
        if self._tail is not None:  # before the JetStream connection its subscribers read on
            self._tail.close()
        if self._jetstream is not None:  # first: its thread writes to the eventfd below
            self._jetstream.close()
        for fd in (self._wake_fd, self._synced_fd, self._failure_r, self._failure_w):
            if fd >= 0:
                os.close(fd)
        self._wake_fd = self._synced_fd = -1
        self._failure_r = self._failure_w = -1
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._tcp is not None:
            self._tcp.close()
        if self._data is not None:
            self._data.close()
            self._data = None

    def set_retention(
        self, stream: str, retain_bytes: int | None = None, retain_age: float | None = None
    ) -> None:
        """Give `stream` its own retention, overriding retain_bytes/retain_age
        (None, None: keep all of it).  Works before and after start()."""
        RetentionPolicy(retain_bytes, retain_age)  # raises ValueError if bad
        self._retention[validate_stream_name(stream)] = (retain_bytes, retain_age)
        if self._data is not None:
            self._data.set_retention(stream, retain_bytes, retain_age)

    def __enter__(self) -> Listener:
        self.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def stats(self) -> ListenerStats:
        """A snapshot of the counters."""
        core = self._core
        c = core.stats if core is not None else None
        files = self._files
        sync_times = files.sync_times if files is not None else SyncTimes()
        pool = self._pool.statistics()
        tcp = self._tcp
        dropped = dict(c.dropped) if c else {}
        if tcp is not None:
            for reason, count in tcp.dropped.items():
                dropped[reason] = dropped.get(reason, 0) + count
        driver = self._driver
        if driver is not None and driver.store_errors:
            dropped["store_error"] = dropped.get("store_error", 0) + driver.store_errors
        if self._tail is not None:  # subscriptions refused, by reason (all "tail_...")
            for reason, count in self._tail.statistics().dropped.items():
                dropped[reason] = dropped.get(reason, 0) + count
        tail = self._tail.statistics() if self._tail is not None else None
        first, last = self._positions()
        return ListenerStats(
            datagrams=self._datagrams + (tcp.frames if tcp else 0),
            bytes=self._bytes + (tcp.bytes if tcp else 0),
            recv_calls=self._recv_calls + (tcp.recv_calls if tcp else 0),
            drains=self._drains + (tcp.drains if tcp else 0),
            accepts=tcp.accepts if tcp else 0,
            accept_drains=tcp.accept_drains if tcp else 0,
            connections=tcp.connections if tcp else 0,
            sessions=c.accepts if c else 0,
            links=core.links if core is not None else 0,
            batches_stored=c.batches if c else 0,
            records_stored=c.records if c else 0,
            syncs=files.syncs if files is not None else 0,
            duplicates=c.duplicates if c else 0,
            held=c.held if c else 0,
            mtu_probes=c.mtu_probes if c else 0,
            retries=c.retries if c else 0,
            fenced=c.fenced if c else 0,
            acks=c.acks if c else 0,
            gro=self._gro,
            rcvbuf=self._rcvbuf,
            pool_hits=pool.hits,
            pool_misses=pool.misses,
            memory=core.memory if core is not None else 0,
            dropped=dropped,
            frames=tcp.frames if tcp else 0,
            subscribers=tail.subscribers if tail is not None else 0,
            tail_connections=tail.subscribers + tail.pending if tail is not None else 0,
            frame_bytes=tcp.bytes if tcp else 0,
            key_reloads=self._key_reloads,
            key_reload_failures=self._key_reload_failures,
            stream_first=first,
            stream_last=last,
            stream_records=dict(driver.stream_records) if driver is not None else {},
            stream_bytes=dict(driver.stream_bytes) if driver is not None else {},
            sync_seconds=tuple(sync_times.counts),
            sync_seconds_sum=sync_times.sum,
            no_room=driver.rooms() if driver is not None else {},
            free_bytes=driver.free_by_stream() if driver is not None else {},
        )

    def _positions(self) -> tuple[dict[str, int], dict[str, int]]:
        """({stream: first position}, {stream: last position}) of a data directory's
        open streams (empty for a cluster, whose positions are the cluster's)."""
        data = self._data
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        if data is None:
            return first, last
        for stream in data.streams():
            log = data.open_log(stream)
            if log is not None:
                first[stream] = log.first_position
                last[stream] = log.last_position
        return first, last

    # -------------------------------------------------------------- sockets
    def _bind_udp(self, host: str, port: int) -> socket.socket:
        family, sockaddr = _address.resolve(host, port)
        sock = socket.socket(family, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            try:  # root (CAP_NET_ADMIN) may go past net.core.rmem_max
                sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, SOCKET_BUFFER)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
            self._rcvbuf = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
            try:
                sock.setsockopt(SOL_UDP, UDP_GRO, 1)
                self._gro = True
            except OSError:
                self._gro = False
            sock.bind(sockaddr)
        except OSError as exc:
            sock.close()
            raise Error(f"cannot bind udp {_address.format_hostport(host, port)}: {exc}") from None
        bound = sock.getsockname()
        self.udp_address = (str(bound[0]), int(bound[1]))
        return sock

    # ------------------------------------------------------------ the loop
    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # a bug: log it loudly, and tell whoever waits
            self._died(exc, "loop")

    def _died(self, exc: BaseException, what: str) -> None:
        self.error = exc
        log.error("purelink listener %s crashed", what, exc_info=exc)
        if self._failure_w >= 0:
            with contextlib.suppress(OSError):
                os.write(self._failure_w, b"x")

    def _loop(self) -> None:
        assert self._core is not None and self._epoll is not None
        ep = self._epoll
        handlers = self._handlers
        core = self._core
        driver = self._driver
        assert driver is not None
        tcp = self._tcp
        monotonic = time.monotonic
        events = driver.backend.events  # what the store said (take_events hands it over)
        try:
            while not self._stop:
                # no timeout unless a TCP connection owes bytes or an ACK is held for a
                # sync (core_answers.py): an idle listener sleeps
                t = monotonic()
                timeout = core.timeout(t)
                if tcp is not None:
                    owed = tcp.timeout(t)
                    if owed >= 0 and (timeout < 0 or owed < timeout):
                        timeout = owed
                room = driver.check(t)  # the free space, and streams waiting for room
                if room is not None:
                    wait = max(room - t, 0.0)
                    if timeout < 0 or wait < timeout:
                        timeout = wait
                self._polling = True  # from here on the store wakes the loop (`wake`)...
                if events:  # ...and what it said before that is taken without sleeping
                    timeout = 0
                ready = ep.poll(timeout)
                self._polling = False
                now = monotonic()
                for fd, mask in ready:
                    handler = handlers.get(fd)
                    if handler is not None:
                        handler(now, mask)
                    elif fd == self._synced_fd:  # edge-triggered: nothing to read
                        driver.take_events()
                    elif fd == self._wake_fd:
                        with contextlib.suppress(BlockingIOError):
                            os.eventfd_read(self._wake_fd)
                        self._take_keys(now)
                if tcp is not None:
                    tcp.expire(now)
                # the round's in-order batches go to the store, then the buffers
                # they point into go back to the free list
                driver.write()
                driver.take_events()  # sync="always"/"none": durable already
                pool = self._pool
                for buf in self._round_buffers:
                    pool.put(buf)
                self._round_buffers.clear()
                self._answer(monotonic())
            driver.take_events()
        finally:
            self._epoll = None
            ep.close()

    def set_keys(self, keys: KeyTable, timeout: float = 5.0) -> bool:
        """Use `keys` for every handshake from now on (SIGHUP in `purelink serve`):
        sessions whose key was removed, expired, or no longer allows their stream
        are ended (their links fail with "key revoked"); the others run on.  Any
        thread; only for a listener given a secret or keys.  Returns once the
        listener's loop uses them (True), or after `timeout` seconds (False)."""
        if self._keys is None:
            raise ValueError("this listener has no keys: start it with secret= or keys=")
        thread = self._thread
        if thread is None or not thread.is_alive():
            self._keys = keys  # not serving: start() (or nothing) takes them
            self._key_reloads += 1
            return True
        done = threading.Event()
        self._new_keys.append((keys, done))
        os.eventfd_write(self._wake_fd, 1)
        if threading.current_thread() is thread:
            return False  # the loop takes them when this handler returns
        return done.wait(timeout)

    def _take_keys(self, now: float) -> None:
        while self._new_keys:
            keys, done = self._new_keys.popleft()
            self._use_keys(keys, now)
            done.set()

    def _use_keys(self, keys: KeyTable, now: float) -> None:
        self._keys = keys
        self._key_reloads += 1
        from ..protocol.secure_core import SecureCore  # noqa: PLC0415 - loaded with the keys

        core = self._core
        if isinstance(core, SecureCore):
            ended = core.set_keys(keys, now)
            log.info(
                "keys reloaded (%d key%s); %d sessions ended",
                len(keys),
                "" if len(keys) == 1 else "s",
                ended,
                extra={"keys": len(keys), "sessions_ended": ended},
            )
        if self._tail is not None:
            self._tail.set_keys(keys)

    def add_source(self, fd: int, handler: Callable[[float, int], None], events: int = 0) -> None:
        """Poll `fd` in the loop and call `handler(now, event_mask)` when it is ready.
        Call it from the loop's own thread, or before start() returns."""
        assert self._epoll is not None
        self._handlers[fd] = handler
        self._epoll.register(fd, events or select.EPOLLIN)

    def remove_source(self, fd: int, closing: bool = False) -> None:
        """Stop polling `fd`.  `closing`: the caller closes `fd` right after and
        holds its only descriptor (closing it takes it out of the epoll set, so
        the epoll_ctl call is saved: one per TCP connection)."""
        if self._handlers.pop(fd, None) is not None and self._epoll is not None and not closing:
            with contextlib.suppress(OSError):
                self._epoll.unregister(fd)

    def _drain(self, now: float, mask: int = 0) -> None:
        """Take datagrams until EAGAIN (or the budget); the loop stores what is in order."""
        sock = self._sock
        core = self._core
        assert sock is not None and core is not None
        self._drains += 1
        pool = self._pool
        used = self._round_buffers
        receive = core.receive_datagram
        intake = core.intake
        if intake is not None:
            # the compiled core receives and takes the common case itself (a buffer
            # whose datagrams it took whole goes back to the pool at once: it keeps
            # copies; one Python saw waits in `used` for the round); a core behind
            # the encrypted layer gets every datagram as it came
            fast = type(core).receive_datagram is ListenerCore.receive_datagram
            calls, datagrams, nbytes = intake.drain(
                core, sock.fileno(), pool.get, pool.put, used, self._gro, fast,
                DRAIN_BUDGET, now, receive,
            )  # fmt: skip
            self._recv_calls += calls
            self._datagrams += datagrams
            self._bytes += nbytes
            return
        recvmsg_into = sock.recvmsg_into
        gro = self._gro
        for _ in range(DRAIN_BUDGET):
            buf = pool.get()
            try:
                nbytes, ancdata, _flags, addr = recvmsg_into([buf], _CMSG_SPACE if gro else 0)
            except BlockingIOError:
                pool.put(buf)
                break
            except OSError as exc:
                pool.put(buf)
                if exc.errno in (errno.ECONNREFUSED, errno.EINTR):
                    continue
                raise
            used.append(buf)
            self._recv_calls += 1
            self._bytes += nbytes
            view = memoryview(buf)[:nbytes]
            segment = 0
            if ancdata:
                for level, kind, cdata in ancdata:
                    if level == SOL_UDP and kind == UDP_GRO:
                        (segment,) = struct.unpack("=i", cdata[:4])
            if segment and segment < nbytes:
                for start in range(0, nbytes, segment):
                    self._datagrams += 1
                    receive(view[start : start + segment], addr, now)
            else:
                self._datagrams += 1
                receive(view, addr, now)

    def _answer(self, now: float) -> None:
        sock = self._sock
        core = self._core
        assert core is not None
        routes = self.routes
        for data, addr in core.datagrams_to_send(now):
            try:
                route = routes.get(addr)
                if route is not None:
                    route(data)
                elif sock is not None and not addr[0].startswith(TCP_PREFIX):
                    sock.sendto(data, addr)
                else:  # a TCP peer whose connection has closed
                    core.stats.dropped["no_route"] = core.stats.dropped.get("no_route", 0) + 1
            except OSError:
                core.stats.dropped["send_failed"] = core.stats.dropped.get("send_failed", 0) + 1


def failure_fd(listener: Listener) -> int:
    """A descriptor that becomes readable if a thread of `listener` dies (its
    `error` says why): `purelink serve` waits on it with its signal pipe, so a
    listener that stopped serving does not stay up pretending to.  A function of
    this module, not a method, so that the public `Listener` shows only the API
    of SPEC §3."""
    if listener._failure_r < 0:
        listener._failure_r, listener._failure_w = os.pipe()
        if listener.error is not None:
            os.write(listener._failure_w, b"x")
    return listener._failure_r


def key_reload_failed(listener: Listener) -> None:
    """Count a reload that failed before it reached the listener (a keys file that
    did not read: `purelink serve` on SIGHUP); `stats().key_reload_failures`.  A
    function of this module for the reason `failure_fd` is."""
    listener._key_reload_failures += 1


def not_ready(listener: Listener) -> str | None:
    """Why `listener` cannot take records now, in a few words, or None when it can:
    started and not closed, its loop alive, its sockets bound, its store writable
    (health.py) and, on a cluster, connected to it (`serve --metrics`' /readyz)."""
    if not listener._started or listener._closed:
        return "not started" if not listener._started else "closed"
    thread = listener._thread
    if listener.error is not None or thread is None or not thread.is_alive():
        return "the listener's loop stopped"
    config = listener._config
    if config.udp is not None and listener._sock is None:
        return "udp socket not bound"
    if config.tcp is not None and listener.tcp_address is None:
        return "tcp socket not bound"
    driver = listener._driver
    held = driver.rooms() if driver is not None else {}
    if listener._jetstream is not None:
        if not listener._jetstream.connected():
            return "JetStream unreachable"
        return store_problem(None, config.min_free_mark(), held, listener._jetstream.failed)
    failed = listener._files.failed if listener._files is not None else set()
    return store_problem(listener.path, config.min_free_mark(), held, failed)
