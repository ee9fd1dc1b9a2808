"""Security over real loopback sockets: a listener with a secret under attack.

Why it exists: test_security.py proves the sans-IO core's rules by hand;
this file proves that the drivers keep them with real sockets, real threads
and real time -- that a listener flooded with hostile datagrams stays up,
drops and counts every one of them, keeps no state and makes no stream for
them, while a valid link ships its records exactly once; that forged answers
at a link change nothing; that a missing secret fails within
the connect timeout; that the limits hold and are counted; and that the CLI
exposes all of it.

The attackers are sockets bound to other loopback addresses (127.0.0.2 and
up: Linux routes all of 127/8 to lo) and `OnPath`, a relay between the link
and the listener that sees, replays and injects datagrams as an on-path
attacker would.  A link's UDP socket is connected, so the kernel drops
datagrams from any other address: only an on-path (or source-spoofing)
attacker can reach it at all, which is why forged answers go through OnPath.
In the flood, `Attack` drives both and counts what it sent, by kind, so the
checks can hold the listener's counters to it.
Every wait is a bounded poll with a deadline; every loop is bounded.
"""

from __future__ import annotations

import contextlib
import random
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from crc32c import crc32c

import purelink
from helpers.cli import assert_one_line_error, run, serving
from purelink.cli import command as cli
from purelink.protocol import handshake, wire

KEY = b"purelink-test-secret-0123456789!"
WRONG = b"purelink-wrong-secret-987654321!"


def mac_flagged(datagram: bytes) -> bytes:
    """`datagram` as the retired MAC-only mode sent it: the type's high bit set
    and 16 bytes after the CRC (here not a MAC of anything)."""
    body = bytearray(datagram[:-4])
    body[3] |= 0x80
    return bytes(body) + crc32c(bytes(body)).to_bytes(4, "little") + bytes(range(16))


ATTACKER_HOSTS = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]
RECORD = b"x" * 61


def url(lst: purelink.Listener) -> str:
    assert lst.udp_address is not None
    return "udp://%s:%d" % lst.udp_address


def wait_until(predicate: Callable[[], bool], timeout: float = 20.0) -> bool:
    """Poll `predicate` until it holds or `timeout` passes (a bounded wait, no fixed sleep)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return predicate()
        time.sleep(0.0005)
    return True


def received(lst: purelink.Listener, n: int, relay: OnPath | None = None) -> Callable[[], bool]:
    """A predicate: the listener has taken `n` datagrams (plus all `relay` relayed to it)."""
    return lambda: lst.stats().datagrams >= n + (relay.relayed_up if relay else 0)


def attacker(host: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind((host, 0))
    sock.setblocking(False)
    return sock


def drain(sock: socket.socket) -> list[bytes]:
    """Every datagram waiting on a non-blocking socket (at most 10,000)."""
    out = []
    for _ in range(10_000):
        try:
            out.append(sock.recv(65536))
        except BlockingIOError:
            break
    return out


def streams_on_disk(lst: purelink.Listener) -> list[str]:
    folder = Path(lst.path) / "streams"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


class OnPath:
    """An on-path attacker between one link and a listener.

    It relays every datagram both ways (the listener sees the relay's `back`
    socket as the link), remembers the last ones it relayed, and can inject
    datagrams toward the link (from the address the link talks to) or toward
    the listener (from the link's address as the listener knows it).
    """

    def __init__(self, target: tuple[str, int], lifetime: float = 120.0) -> None:
        self.front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.front.bind(("127.0.0.1", 0))
        self.back = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.back.bind(("127.0.0.1", 0))
        self.back.connect(target)
        for sock in (self.front, self.back):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
            sock.setblocking(False)
        self.client: tuple[str, int] | None = None
        self.up: deque[bytes] = deque(maxlen=2000)  # link -> listener, as relayed
        self.down: deque[bytes] = deque(maxlen=2000)  # listener -> link
        self.relayed_up = 0
        self._lock = threading.Lock()  # the relay and inject_up share the `back` socket
        self._stop = False
        self._deadline = time.monotonic() + lifetime
        self._thread = threading.Thread(target=self._run, name="on-path", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return "udp://127.0.0.1:%d" % self.front.getsockname()[1]

    def inject_down(self, data: bytes) -> None:
        assert self.client is not None
        self.front.sendto(data, self.client)

    def inject_up(self, data: bytes) -> None:
        with self._lock:
            self.back.send(data)
            self.relayed_up += 1

    def close(self) -> None:
        self._stop = True
        self._thread.join(10)
        self.front.close()
        self.back.close()

    def __enter__(self) -> OnPath:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(self.front, selectors.EVENT_READ)
            sel.register(self.back, selectors.EVENT_READ)
            while not self._stop and time.monotonic() < self._deadline:
                for key, _ in sel.select(0.05):
                    if key.fileobj is self.front:
                        self._relay_up()
                    else:
                        self._relay_down()

    def _relay_up(self) -> None:
        for _ in range(1000):
            try:
                data, self.client = self.front.recvfrom(65536)
            except BlockingIOError:
                return
            self.up.append(data)
            with self._lock:
                self.back.send(data)
                self.relayed_up += 1

    def _relay_down(self) -> None:
        for _ in range(1000):
            try:
                data = self.back.recv(65536)
            except (BlockingIOError, ConnectionRefusedError):
                return
            self.down.append(data)
            if self.client is not None:
                self.front.sendto(data, self.client)


@pytest.fixture
def secure(tmp_path: Path) -> Iterator[purelink.Listener]:
    with purelink.Listener(tmp_path / "data", udp="127.0.0.1:0", secret=KEY) as lst:
        yield lst


# ---------------------------------------------------------------- secrets
def test_a_secret_link_ships_end_to_end(secure: purelink.Listener) -> None:
    with purelink.connect(url(secure), stream="s", secret=KEY) as link:
        for i in range(2000):
            link.queue(b"%d" % i)
        assert link.wait_stored(timeout=20)
    assert [p for _, p in purelink.Store(secure.path).read("s")] == [b"%d" % i for i in range(2000)]
    assert secure.stats().dropped == {}


@pytest.mark.parametrize(
    ("listener_key", "link_key", "counter"),
    [(KEY, None, "unauthenticated"), (None, KEY, "bad_checksum")],
    ids=["missing", "unexpected"],
)
def test_a_missing_or_unexpected_secret_fails_within_the_timeout(
    tmp_path: Path, listener_key: bytes | None, link_key: bytes | None, counter: str
) -> None:
    """A keyed listener drops plaintext unanswered, and one without keys cannot
    open an INIT: the link hears nothing and says so when its timeout ends."""
    with purelink.Listener(tmp_path / "d", udp="127.0.0.1:0", secret=listener_key) as lst:
        started = time.monotonic()
        with pytest.raises(purelink.ConnectError, match="missing or unexpected secret"):
            purelink.connect(url(lst), stream="s", secret=link_key, timeout=0.5)
        assert time.monotonic() - started < 0.5 + 5.0  # its own timeout, not the default 10 s
        stats = lst.stats()
        assert set(stats.dropped) == {counter} and stats.dropped[counter] >= 1
        assert stats.links == 0 and stats.retries == 0 and stats.sessions == 0
        assert streams_on_disk(lst) == []


def test_a_wrong_secret_is_refused_at_once_with_its_reason(tmp_path: Path) -> None:
    with purelink.Listener(tmp_path / "d", udp="127.0.0.1:0", secret=KEY) as lst:
        started = time.monotonic()
        with pytest.raises(purelink.ConnectError, match="wrong secret") as refused:
            purelink.connect(url(lst), stream="s", secret=WRONG, timeout=60)
        assert time.monotonic() - started < 30  # answered, not timed out
        assert refused.value.permanent
        stats = lst.stats()
        assert stats.dropped == {"bad_secret": 1}
        assert stats.links == 0 and stats.sessions == 0
        assert streams_on_disk(lst) == []


def test_a_short_secret_is_refused_at_once(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        purelink.Listener(tmp_path / "d", udp="127.0.0.1:0", secret=b"short")
    with pytest.raises(ValueError, match="16 bytes"):
        purelink.connect("udp://127.0.0.1:9", stream="s", secret=b"short")


def test_unauthenticated_datagrams_are_dropped_before_any_state(secure: purelink.Listener) -> None:
    assert secure.udp_address is not None
    batch = wire.encode_batch((1 << 63) | 5, 1, 1, [b"forged"])
    kinds = [
        wire.encode_hello(wire.Hello(1, "evil", "", (1 << 63) | 5, 1400, b"")),
        mac_flagged(wire.encode_hello(wire.Hello(2, "evil", "p", 0, 1400, b"c" * 20))),
        wire.encode_data(1234, 1, batch),
        mac_flagged(wire.encode_data(1234, 1, batch)),
        mac_flagged(wire.encode_fragment(1234, 1, 1, 1, 1 << 24, 0, b"x" * 1000)),
    ]
    with contextlib.closing(attacker(ATTACKER_HOSTS[0])) as sock:
        for i in range(2000):
            sock.sendto(kinds[i % len(kinds)], secure.udp_address)
            if i % 100 == 99:
                assert wait_until(received(secure, i + 1))
        assert wait_until(lambda: secure.stats().datagrams == 2000)
        stats = secure.stats()
        assert stats.dropped == {"unauthenticated": 2000}
        assert (stats.links, stats.retries, stats.acks, stats.memory) == (0, 0, 0, 0)
        assert streams_on_disk(secure) == []
        assert drain(sock) == []  # not one byte back to a forger


# ------------------------------------------------------- forged answers
def forged_answers(conn_id: int, epoch: int) -> list[bytes]:
    """What an on-path attacker without the key might send at a live link."""
    big = 10**9
    plain = [
        wire.encode_ack(wire.Ack(conn_id, epoch, big, big, big, big, 0, (), ())),
        wire.encode_refuse(wire.Refuse(conn_id, 0, epoch, wire.RefuseReason.FENCED)),
        wire.encode_refuse(wire.Refuse(conn_id, 0, epoch, wire.RefuseReason.UNKNOWN)),
        wire.encode_refuse(wire.Refuse(0, 1, 0, wire.RefuseReason.LIMIT)),
        wire.encode_accept(wire.Accept(conn_id, 1, 1, epoch + 1, 0, 0, 1 << 20, 9)),
        wire.encode_retry(wire.Retry(1, b"c" * 20)),
    ]
    return plain + [mac_flagged(d) for d in plain]


def session_of(mitm: OnPath) -> tuple[int, int]:
    """(conn_id, epoch) of the live session as an attacker on the path sees it: the
    conn id is in every sealed datagram's header; the epoch is encrypted, and a
    fresh session's is 1."""
    for data in reversed(mitm.up):
        if data[3] & ~1 == handshake.SEALED:
            return int.from_bytes(data[4:8], "little"), 1
    raise AssertionError("no sealed datagram relayed yet")


def test_a_link_ignores_forged_answers_and_finishes(secure: purelink.Listener) -> None:
    assert secure.udp_address is not None
    with OnPath(secure.udp_address) as mitm:
        link = purelink.connect(mitm.url, stream="s", secret=KEY, timeout=10)
        link.queue(b"first")
        assert link.wait_stored(timeout=10)
        conn_id, epoch = session_of(mitm)
        genuine = list(mitm.down)  # a RETRY, the ACCEPT, ACKs: authentic, but old
        for i in range(1, 1001):
            link.queue(b"%d" % i)
            if i % 100 == 0:
                for data in forged_answers(conn_id, epoch) + genuine:
                    mitm.inject_down(data)
                assert link.stored <= link.queued
        assert link.close(timeout=20)
        stats = link.stats()
    assert stats.reconnects == 0 and stats.stored == stats.queued == 1001
    records = [p for _, p in purelink.Store(secure.path).read("s")]
    assert records == [b"first"] + [b"%d" % i for i in range(1, 1001)]


# ------------------------------------------------------------ the flood
PER_ROUND = 100  # hostile datagrams a round: few enough that the kernel never drops one
KNOWN_DROPS = {
    "truncated", "malformed", "unauthenticated", "bad_cookie", "wrong_address",
    "replayed", "unknown_conn", "unknown_key", "bad_secret",
}  # fmt: skip


class Attack:
    """The hostile side of the flood: the attacker sockets throw a seeded mix of
    datagrams at the listener, and the on-path relay injects forged answers down
    and replays up; it counts what it sent, by kind, and the bytes each attacker
    sent and got back."""

    def __init__(
        self, lst: purelink.Listener, mitm: OnPath, socks: list[socket.socket], seed: int
    ) -> None:
        assert lst.udp_address is not None
        self.lst, self.mitm, self.socks, self.target = lst, mitm, socks, lst.udp_address
        self.rng = random.Random(seed)
        self.hellos = [d for d in mitm.up if d[3] == handshake.INIT]
        self.plain_hello, self.cookie_hello = self.hellos[0], self.hellos[-1]
        assert self.plain_hello != self.cookie_hello  # cookie-less first, then with one
        self.forged = forged_answers(*session_of(mitm))
        self.sent = self.valid = self.to_wrong_address = self.bad_cookies = 0
        self.same_address = 0
        self.sent_bytes = dict.fromkeys(ATTACKER_HOSTS, 0)
        self.got_bytes = dict.fromkeys(ATTACKER_HOSTS, 0)

    def round(self, n: int) -> None:
        """`n` hostile datagrams from the attackers, forged answers at the link and
        replays from its address; then wait until the listener has taken them all."""
        captured = [d for d in list(self.mitm.up)[-200:] if d not in self.hellos]
        for _ in range(n):
            sock = self.socks[self.sent % len(self.socks)]
            data = self.datagram(captured)
            sock.sendto(data, self.target)
            self.sent_bytes[sock.getsockname()[0]] += len(data)
            self.sent += 1
        for data in self.forged:
            self.mitm.inject_down(data)
        old = [d for d in list(self.mitm.up)[-20:] if d not in self.hellos]
        for data in old[:2]:  # replays from the link's own address: the replay window
            self.mitm.inject_up(data)
            self.same_address += 1
        assert wait_until(received(self.lst, self.sent, self.mitm))
        self.drain_replies()

    def datagram(self, captured: list[bytes]) -> bytes:
        """The next hostile datagram, counted by kind where the listener counts it apart."""
        rng = self.rng
        roll = rng.random()
        if self.sent % 500 == 0:
            self.valid += 1
            return self.plain_hello  # replayed from elsewhere: a RETRY, not a drop
        if self.sent % 500 == 1:
            self.bad_cookies += 1
            return self.cookie_hello  # its cookie binds another address
        if roll < 0.2 and captured:
            self.to_wrong_address += 1
            return rng.choice(captured)  # authentic, but from the wrong address
        if roll < 0.4 and captured:
            raw = bytearray(rng.choice(captured))
            for bit in rng.sample(range(8 * len(raw)), rng.randrange(1, 4)):
                raw[bit // 8] ^= 1 << (bit % 8)  # distinct bits: never the original
            return bytes(raw)
        if roll < 0.5 and captured:
            data = rng.choice(captured)
            return data[: rng.randrange(len(data))]
        if roll < 0.6 and captured:
            return rng.choice(captured) + rng.randbytes(rng.randrange(1, 64))
        if roll < 0.8:
            return rng.choice(self.forged)  # no key or a wrong one; and the wrong way
        return rng.randbytes(rng.randrange(0, 1500))

    def drain_replies(self) -> None:
        """Count the bytes that came back to each attacker."""
        for sock in self.socks:
            self.got_bytes[sock.getsockname()[0]] += sum(map(len, drain(sock)))


def open_valid_link(mitm: OnPath) -> purelink.Link:
    """The valid link, through the on-path attacker, its first record stored (so
    the attacker has seen both its HELLOs and its session)."""
    link = purelink.connect(mitm.url, stream="live", secret=KEY, timeout=10)
    link.queue(b"0")
    assert link.wait_stored(timeout=10)
    return link


def feed(link: purelink.Link, queued: int, records: int, total: int) -> int:
    """Queue the valid link's share of records for one round; returns the count queued."""
    for _ in range(max(records * PER_ROUND // total, 1)):
        if queued < records:
            link.queue(b"%d" % queued + RECORD)
            queued += 1
    return queued


def settle(
    lst: purelink.Listener, mitm: OnPath, link: purelink.Link, attack: Attack
) -> tuple[purelink.LinkStats, purelink.ListenerStats]:
    """The valid link finishes, the listener takes every datagram still in flight,
    and it stays up: a new link ships a record after it all.  Returns the link's
    and the listener's stats (the latter before the new link)."""
    assert link.close(timeout=30), "the valid link finishes"
    link_stats = link.stats()
    mitm.close()
    assert wait_until(lambda: lst.stats().datagrams == mitm.relayed_up + attack.sent)
    attack.drain_replies()
    stats = lst.stats()
    assert lst.error is None, "the listener stays up"
    with purelink.connect(url(lst), stream="live", secret=KEY, timeout=10) as again:
        again.queue(b"after")
        assert again.wait_stored(timeout=10)
    return link_stats, stats


def check_shipped_once(data: Path, link_stats: purelink.LinkStats, queued: int) -> None:
    """The valid link finished exactly once: one session, every record once, in order."""
    assert link_stats.reconnects == 0 and link_stats.stored == link_stats.queued == queued
    got = [p for _, p in purelink.Store(data).read("live")]
    assert got == [b"0"] + [b"%d" % i + RECORD for i in range(1, queued)] + [b"after"]
    assert purelink.Store(data).streams() == ["live"]  # none that no link created


def check_every_datagram_counted(
    stats: purelink.ListenerStats, attack: Attack, retries0: int
) -> None:
    """Every hostile datagram is counted: dropped by reason, or (a replayed HELLO)
    answered; and no attacker got back more than 3x the bytes it sent."""
    dropped = stats.dropped
    sent = attack.sent
    print("hostile datagrams:", sent, "dropped by reason:", dict(sorted(dropped.items())))
    assert sum(dropped.values()) == sent - attack.valid + attack.same_address
    assert dropped["bad_cookie"] == attack.bad_cookies
    # from the wrong address: the authentic ones and damaged copies (the address is
    # checked before anything is decrypted, so those count here too)
    assert dropped["wrong_address"] >= attack.to_wrong_address
    assert stats.retries == retries0 + attack.valid + attack.bad_cookies
    assert set(dropped) <= KNOWN_DROPS
    assert dropped["unauthenticated"] > sent // 4
    assert dropped["replayed"] >= attack.same_address  # replays from the link's own address
    for host in ATTACKER_HOSTS:  # never more than 3x the bytes to an unproven address
        assert attack.got_bytes[host] <= 3 * attack.sent_bytes[host]


def flood(tmp_path: Path, total: int, records: int, seed: int) -> None:
    """Throw `total` hostile datagrams at a listener with a secret while one
    valid link ships `records` records through an on-path attacker, then
    check everything docs/security.md promises about it."""
    with (
        purelink.Listener(tmp_path / "d", udp="127.0.0.1:0", secret=KEY) as lst,
        OnPath(lst.udp_address) as mitm,  # type: ignore[arg-type]
        contextlib.ExitStack() as stack,
    ):
        socks = [stack.enter_context(contextlib.closing(attacker(h))) for h in ATTACKER_HOSTS]
        link = open_valid_link(mitm)
        attack = Attack(lst, mitm, socks, seed)
        retries0 = lst.stats().retries
        queued = 1
        while attack.sent < total:
            queued = feed(link, queued, records, total)
            attack.round(min(PER_ROUND, total - attack.sent))
        link_stats, stats = settle(lst, mitm, link, attack)
    check_shipped_once(tmp_path / "d", link_stats, queued)
    check_every_datagram_counted(stats, attack, retries0)


def test_a_hundred_thousand_hostile_datagrams(tmp_path: Path) -> None:
    flood(tmp_path, total=100_000, records=20_000, seed=7)


@pytest.mark.slow
def test_a_million_hostile_datagrams(tmp_path: Path) -> None:
    flood(tmp_path, total=1_000_000, records=200_000, seed=8)


# ------------------------------------------------------ limits, live
def test_handshakes_are_rate_limited_per_source_live(tmp_path: Path) -> None:
    with (
        purelink.Listener(
            tmp_path / "d", udp="127.0.0.1:0", handshake_rate=0.001, handshake_burst=3
        ) as lst,
        contextlib.closing(attacker(ATTACKER_HOSTS[0])) as sock,
    ):
        assert lst.udp_address is not None
        for i in range(10):
            hello = wire.encode_hello(wire.Hello(i, "s", "", 1 << 63 | i, 1400, b""))
            sock.sendto(hello, lst.udp_address)
        assert wait_until(lambda: lst.stats().datagrams == 10)
        assert lst.stats().dropped == {"handshake_rate_limited": 7}
        replies: list[bytes] = []

        def three() -> bool:
            replies.extend(drain(sock))
            return len(replies) >= 3

        assert wait_until(three)
        assert [type(wire.decode_datagram(r)) for r in replies] == [wire.Retry] * 3
        # another source (the link, on 127.0.0.1) still gets in
        with purelink.connect(url(lst), stream="s", timeout=5) as link:
            link.queue(b"ok")
            assert link.wait_stored(timeout=10)


def test_stream_and_link_limits_live(tmp_path: Path) -> None:
    with purelink.Listener(tmp_path / "d", udp="127.0.0.1:0", max_streams=1, max_links=2) as lst:
        a = purelink.connect(url(lst), stream="a", timeout=5)
        with pytest.raises(purelink.ConnectError, match="refused the link: max_streams") as full:
            purelink.connect(url(lst), stream="b", timeout=5)
        assert not full.value.permanent  # retention may make room; a later try may pass
        assert lst.stats().dropped.get("stream_limit", 0) >= 1
        b = purelink.connect(url(lst), stream="a", timeout=5)
        with pytest.raises(purelink.ConnectError, match="refused the link: max_links"):
            purelink.connect(url(lst), stream="a", timeout=5)
        assert lst.stats().dropped.get("link_limit", 0) >= 1
        a.close(timeout=5)
        b.close(timeout=5)
        assert streams_on_disk(lst) == ["a"]


def test_record_size_limit_live(tmp_path: Path) -> None:
    with purelink.Listener(tmp_path / "d", udp="127.0.0.1:0", max_record=4000) as lst:
        link = purelink.connect(url(lst), stream="s", timeout=5)
        link.queue(b"small")
        # the link learned the listener's limit in the handshake and refuses at once;
        # a client that sends one anyway is dropped ("too_large": test_security.py)
        with pytest.raises(ValueError):
            link.queue(bytes(10_000))
        assert link.wait_stored(timeout=10)
        assert link.stored == 1
        link.close(timeout=5)


@pytest.mark.parametrize("name", ["..", ".", ".hidden", "a/b", "../etc", "a b", "x" * 201])
def test_bad_stream_names_are_refused_live(secure: purelink.Listener, name: str) -> None:
    with pytest.raises((purelink.ConnectError, ValueError)):
        purelink.connect(url(secure), stream=name, secret=KEY, timeout=5)
    assert streams_on_disk(secure) == []
    assert not (Path(secure.path) / "etc").exists()


# ------------------------------------------------------------ the CLI
def test_cli_secret_end_to_end_and_refusals(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(KEY + b"\n")
    wrong = tmp_path / "wrong"
    wrong.write_bytes(WRONG)
    data = tmp_path / "data"
    # a public address is fine with a secret file (the listener is reached on loopback)
    with serving(data, "--udp", "0.0.0.0:0", "--secret-file", str(secret)) as srv:
        port = srv.udp.rsplit(":", 1)[1]
        target = f"udp://127.0.0.1:{port}"
        ok = run("send", target, "--stream", "s", "--secret-file", str(secret), stdin=b"a\nb\n")
        assert ok.returncode == 0, ok.stderr
        for args in ([], ["--secret-file", str(wrong)]):
            bad = run("send", target, "--stream", "s", "--timeout", "0.5", *args, stdin=b"c\n")
            line = assert_one_line_error(bad, 1)
            assert ("missing or unexpected secret" if not args else "wrong secret") in line
        code, err = srv.stop()
    assert code == 0, err
    assert [p for _, p in purelink.Store(data).read("s")] == [b"a", b"b"]


def test_cli_limits_are_options(tmp_path: Path) -> None:
    data = tmp_path / "data"
    limits = ["--max-streams", "1", "--max-links", "5", "--max-record", "1000"]
    limits += ["--max-reorder", "100000", "--max-memory", "1000000", "--handshake-rate", "50"]
    with serving(data, "--udp", "127.0.0.1:0", *limits) as srv:
        assert run("send", srv.url, "--stream", "a", stdin=b"1\n").returncode == 0
        second = run("send", srv.url, "--stream", "b", "--timeout", "2", stdin=b"2\n")
        line = assert_one_line_error(second, 1)
        assert "refused the link: max_streams" in line and "--max-streams" in line
        code, err = srv.stop()
    assert code == 0, err
    assert "; 1 dropped (1 stream_limit)" in err


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--max-links", "0"),
        ("--max-streams", "0"),
        ("--max-record", "0"),
        ("--max-reorder", "-5"),
        ("--max-memory", "lots"),
        ("--handshake-rate", "-1"),
    ],
)
def test_cli_limits_are_checked(
    tmp_path: Path, flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["serve", "--data", str(tmp_path), flag, value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("purelink serve: error: ") and flag in err[0]
    assert not any(tmp_path.iterdir())
