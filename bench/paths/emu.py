"""A path emulator on TUN devices between two network namespaces (needs root).

Why it exists: loopback hides everything a real path does to a transport --
delay, a bottleneck with a queue, loss, reordering, outages, a small MTU --
and the kernel's netem is not available on every machine (nor in CI).  This
emulator builds the path itself, in user space, so `purelink bench paths`
(and bench/tests/test_paths.py) can run Linux TCP and purelink through the same
impaired path:

    netns plk-PID-a             root netns                netns plk-PID-b
    10.77.0.1 dev plkPIDa  <->  router process  <->  10.77.1.1 dev plkPIDb
                                (purelink.testing.PathModel decides, per direction)

Set-up (`Emulator.start`): two namespaces (`ip netns add`), two TUN devices
opened here (/dev/net/tun, TUNSETIFF with IFF_TUN | IFF_NO_PI) and moved
into them (`ip link set ... netns`), a /16 on each so the other side is
on-link (no routing, no forwarding: the router is the only way across), IPv6
off (no neighbour discovery noise).  The router is a child process given the
two TUN file descriptors; the devices are not persistent, so they vanish
when it exits.  Nothing here ever sends to an address outside the two
namespaces: neither has a default route or any other device.

Clean-up: `Emulator.close` (also run on SIGINT/SIGTERM through `with`, and
on any failure during set-up) stops the router, kills every process still in
the namespaces and deletes them.  Names carry the owner's pid
(`plk-PID-a`); `sweep_stale` removes those of owners that no longer run (a
run killed with SIGKILL), and every process in the namespace and the router
get PR_SET_PDEATHSIG so they die with the process that started them.

The router loop (`route`): one thread, select() on both devices and its
control pipe with a timeout to the next release time (select's timeout has
microsecond resolution; poll's and epoll's are in milliseconds), a drain of
every readable device until EAGAIN (at most `READ_BUDGET` packets a turn),
then every packet due is written.  It measures itself: how late each packet
left against its release time (p50/p99/max) and its own CPU time.  Control
is one JSON object per line on its stdin ("set", "reset", "stats"), one JSON
answer per line on stdout; EOF on stdin stops it.

`python -m bench.paths.selftest` measures the emulator's accuracy and CPU
(see docs/performance.md, section paths); `python -m bench.paths.selftest
model` what the model's decisions cost per packet, on no devices (no root
needed).  `python -m bench.paths.emu router FD_A FD_B` is the router process
itself, which `Emulator.start` runs.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import json
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import IO, Any

from .constants import CHECKOUT, EMULATOR_MODULE, PEERS_MODULE
from .model import A_TO_B, B_TO_A, Impairment
from .model import Path as EmulatedPath
from .peers import set_parent_death_signal

__all__ = [
    "ADDRESSES",
    "Emulator",
    "EmulatorError",
    "available",
    "set_parent_death_signal",
    "sweep_stale",
]

PREFIX = "plk-"
"""Every namespace this module makes is named plk-PID-a / plk-PID-b."""
_NAME = re.compile(r"^plk-(\d+)-[ab]$")
ADDRESSES = ("10.77.0.1", "10.77.1.1")
"""Side A's and side B's address, each inside its own namespace."""
ROUTER_ADDRESS = bytes([10, 77, 255, 254])
"""Where the router's ICMP errors come from (on-link for both sides, owned by none)."""

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
READ_BUDGET = 256
"""Packets read from one device per turn of the loop (fairness between directions)."""
MAX_SAMPLES = 1 << 20
"""Lateness samples kept between resets (8 MiB at most)."""


class EmulatorError(RuntimeError):
    """The emulator cannot be set up or has failed."""


def available() -> str | None:
    """None if this machine can run the emulator, else the reason in one line."""
    if sys.platform != "linux":
        return "needs Linux (network namespaces and TUN devices)"
    if os.geteuid() != 0:
        return "needs root (network namespaces and TUN devices)"
    if not os.path.exists("/dev/net/tun"):
        return "needs /dev/net/tun (the tun module)"
    if shutil.which("ip") is None:
        return "needs the `ip` command (iproute2)"
    return None


def _ip(*args: str, check: bool = True) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=False)
    if check and done.returncode != 0:
        raise EmulatorError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def _namespaces() -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list", check=False).splitlines() if line]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_namespace(name: str) -> None:
    """Kill every process in namespace `name`, then delete it."""
    for _ in range(3):
        pids = [int(p) for p in _ip("netns", "pids", name, check=False).split() if p.isdigit()]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    _ip("netns", "del", name, check=False)


def sweep_stale() -> list[str]:
    """Delete plk-PID-* namespaces whose owner PID no longer runs; their names."""
    swept = []
    for name in _namespaces():
        found = _NAME.match(name)
        if found and not _alive(int(found.group(1))):
            _kill_namespace(name)
            swept.append(name)
    return swept


def _open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    except OSError as exc:
        os.close(fd)
        raise EmulatorError(f"TUNSETIFF {name}: {exc.strerror}") from None
    return fd


# ------------------------------------------------------------------ the router


class _Router:
    """The loop of the router process: two TUN fds, a control pipe, one Path."""

    def __init__(self, fds: tuple[int, int], ctl_in: int, ctl_out: IO[str]) -> None:
        self.fds = fds
        self.ctl_in = ctl_in
        self.ctl_out = ctl_out
        self.clock = time.monotonic
        self.path = EmulatedPath(Impairment(), Impairment(), self.clock(), router=ROUTER_ADDRESS)
        self.late = array.array("d")
        self.reads = self.writes = self.write_errors = self.turns = 0
        self.cpu0 = time.process_time()
        self.wall0 = self.clock()
        self.pending = b""

    def run(self) -> None:
        fds, ctl = self.fds, self.ctl_in
        watch = [fds[0], fds[1], ctl]
        clock, read, write = self.clock, os.read, os.write
        late = self.late
        while True:
            path = self.path  # "set" replaces it
            now = clock()
            for side, packet, at in path.due(now):
                try:
                    write(fds[side], packet)
                    self.writes += 1
                except OSError:
                    self.write_errors += 1
                if len(late) < MAX_SAMPLES:
                    late.append(clock() - at)  # when it really left, after the write
            due = path.next_release()
            timeout = 0.5 if due is None else max(0.0, due - clock())
            self.turns += 1
            readable, _, _ = select.select(watch, [], [], timeout)
            if not readable:
                continue
            now = clock()
            for fd in readable:
                if fd == ctl:
                    if not self._control():
                        return
                    path = self.path
                    continue
                side = A_TO_B if fd == fds[0] else B_TO_A
                arrive = path.arrive
                for _ in range(READ_BUDGET):
                    try:
                        packet = read(fd, 65535)
                    except BlockingIOError:
                        break
                    except OSError:
                        break  # the device went away: the owner is tearing down
                    self.reads += 1
                    arrive(side, packet, now)

    def _control(self) -> bool:
        chunk = os.read(self.ctl_in, 65536)
        if not chunk:
            return False
        self.pending += chunk
        while b"\n" in self.pending:
            line, _, self.pending = self.pending.partition(b"\n")
            try:
                answer = self._command(json.loads(line))
            except (ValueError, KeyError, TypeError) as exc:
                answer = {"ok": False, "error": str(exc)}
            self.ctl_out.write(json.dumps(answer) + "\n")
            self.ctl_out.flush()
        return True

    def _command(self, cmd: dict[str, Any]) -> dict[str, Any]:
        op = cmd["op"]
        now = self.clock()
        if op == "set":
            self.path = EmulatedPath(
                Impairment.from_json(cmd["forward"]),
                Impairment.from_json(cmd["reverse"]),
                now,
                seed=int(cmd.get("seed", 1)),
                router=ROUTER_ADDRESS,
            )
            self._clear(now)
            return {"ok": True}
        if op == "reset":
            self.path.reset(now)
            self._clear(now)
            return {"ok": True}
        if op == "stats":
            return {"ok": True, **self._stats(now)}
        raise ValueError(f"unknown op {op!r}")

    def _clear(self, now: float) -> None:
        del self.late[:]
        self.reads = self.writes = self.write_errors = self.turns = 0
        self.cpu0 = time.process_time()
        self.wall0 = now

    def _stats(self, now: float) -> dict[str, Any]:
        late = sorted(self.late)

        def pct(q: float) -> float:
            return late[min(len(late) - 1, int(q * len(late)))] * 1e6 if late else 0.0

        wall = max(now - self.wall0, 1e-9)
        cpu = time.process_time() - self.cpu0
        return {
            "forward": self.path.stats(A_TO_B),
            "reverse": self.path.stats(B_TO_A),
            "late_us": {"p50": pct(0.5), "p99": pct(0.99), "max": pct(1.0), "n": len(late)},
            "cpu_s": cpu,
            "wall_s": wall,
            "cpu_share": cpu / wall,
            "reads": self.reads,
            "writes": self.writes,
            "write_errors": self.write_errors,
            "turns": self.turns,
            "in_flight": self.path.in_flight(),
        }


def _raise_priority(how: str) -> str:
    """Let the router run before ordinary processes ("fifo": SCHED_FIFO 10; "nice": -10).

    Its timing is the path's timing: on a loaded machine an ordinary process
    waits milliseconds for a core.  SCHED_FIFO is safe here because the loop
    only ever sleeps in select() until the next release (and the kernel's
    RT throttling keeps 5 % of every core for everyone else regardless).
    """
    with contextlib.suppress(OSError, AttributeError):
        if how == "fifo":
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
            return how
        if how == "nice":
            os.nice(-10)
            return how
    return "none"


def _router_main(argv: Sequence[str]) -> int:
    """`python -m bench.paths.emu router FD_A FD_B`: run the loop (the Emulator starts it)."""
    set_parent_death_signal()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the owner stops it by closing stdin
    fds = (int(argv[0]), int(argv[1]))
    _raise_priority(os.environ.get("PLK_ROUTER_PRIORITY", "fifo"))
    for fd in fds:
        os.set_blocking(fd, False)
    router = _Router(fds, sys.stdin.fileno(), sys.stdout)
    print("ready", flush=True)
    router.run()
    return 0


# ------------------------------------------------------------ the set-up


class Emulator:
    """Two namespaces joined by the router process; `with Emulator() as emu:`.

    `emu.command(side, argv)` is the argv that runs a program in side 0 (A)
    or 1 (B); `emu.set(forward, reverse)` changes the path (and empties it);
    `emu.reset()` restarts the blackout schedule and the counters;
    `emu.stats()` returns the router's counters and its self-measurement.
    """

    def __init__(
        self, forward: Impairment | None = None, reverse: Impairment | None = None
    ) -> None:
        pid = os.getpid()
        self.namespaces = (f"{PREFIX}{pid}-a", f"{PREFIX}{pid}-b")
        self.devices = (f"plk{pid}a", f"plk{pid}b")
        self.addresses = ADDRESSES
        self.forward = forward or Impairment()
        self.reverse = reverse or self.forward
        self.router: subprocess.Popen[str] | None = None
        self._made: list[str] = []

    def start(self) -> Emulator:
        reason = available()
        if reason is not None:
            raise EmulatorError(reason)
        sweep_stale()
        fds: list[int] = []
        try:
            for ns in self.namespaces:
                if ns in _namespaces():
                    _kill_namespace(ns)
                _ip("netns", "add", ns)
                self._made.append(ns)
            for ns, dev, addr in zip(self.namespaces, self.devices, self.addresses, strict=True):
                fds.append(_open_tun(dev))
                _ip("link", "set", dev, "netns", ns)
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "link", "set", dev, "mtu", "1500", "txqueuelen", "1000", "up")
                _ip("-n", ns, "addr", "add", f"{addr}/16", "dev", dev)
                self._sysctl(ns, "net.ipv6.conf.all.disable_ipv6=1")
            self.router = subprocess.Popen(
                [sys.executable, "-m", EMULATOR_MODULE, "router", str(fds[0]), str(fds[1])],
                cwd=CHECKOUT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                pass_fds=fds,
                start_new_session=True,  # Ctrl-C reaches the owner, which stops it
            )
            ready = self._readline(10.0)
            if ready != "ready":
                raise EmulatorError(f"the router did not start: {ready!r}")
            self.set(self.forward, self.reverse)
        except BaseException:
            self.close()
            raise
        finally:
            for fd in fds:
                os.close(fd)  # the router holds them now; they die with it
        return self

    def _sysctl(self, ns: str, setting: str) -> None:
        subprocess.run(
            ["ip", "netns", "exec", ns, "sysctl", "-qw", setting],
            capture_output=True, timeout=20, check=False,
        )  # fmt: skip

    def command(self, side: int, argv: Sequence[str]) -> list[str]:
        """argv that runs `argv` in namespace `side`, killed if its starter dies."""
        guard = [sys.executable, "-m", PEERS_MODULE, "guard", "--"]
        return ["ip", "netns", "exec", self.namespaces[side], *guard, *argv]

    def _readline(self, timeout: float) -> str:
        assert self.router is not None and self.router.stdout is not None
        ready, _, _ = select.select([self.router.stdout], [], [], timeout)
        if not ready:
            raise EmulatorError(f"the router did not answer in {timeout:.0f} s")
        line = self.router.stdout.readline()
        if not line:
            raise EmulatorError(f"the router exited (code {self.router.poll()})")
        return line.strip()

    def _call(self, **cmd: Any) -> dict[str, Any]:
        if self.router is None or self.router.stdin is None:
            raise EmulatorError("the emulator is not running")
        self.router.stdin.write(json.dumps(cmd) + "\n")
        self.router.stdin.flush()
        answer: dict[str, Any] = json.loads(self._readline(10.0))
        if not answer.get("ok"):
            raise EmulatorError(f"router: {answer.get('error')}")
        return answer

    def set(self, forward: Impairment, reverse: Impairment | None = None, seed: int = 1) -> None:
        """Change the path (both directions; reverse defaults to forward); empties it
        and both namespaces' route caches (learned path MTUs)."""
        self.forward, self.reverse = forward, reverse or forward
        self._call(op="set", forward=forward.to_json(), reverse=self.reverse.to_json(), seed=seed)
        self.forget()

    def forget(self) -> None:
        """Empty both namespaces' route caches: the kernels forget what they
        learned of the path (a path MTU from an ICMP error is kept 10 minutes)."""
        for ns in self._made:
            _ip("-n", ns, "route", "flush", "cache", check=False)

    def reset(self) -> None:
        """Blackouts start counting now; counters and self-measurement cleared."""
        self._call(op="reset")

    def stats(self) -> dict[str, Any]:
        return self._call(op="stats")

    def router_pid(self) -> int:
        assert self.router is not None
        return self.router.pid

    def close(self) -> None:
        """Stop the router, kill what runs in the namespaces, delete them."""
        router, self.router = self.router, None
        if router is not None:
            with contextlib.suppress(OSError):
                if router.stdin is not None:
                    router.stdin.close()
            try:
                router.wait(timeout=5)
            except subprocess.TimeoutExpired:
                router.kill()
                router.wait()
            if router.stdout is not None:
                router.stdout.close()
        for ns in self._made:
            _kill_namespace(ns)
        self._made.clear()

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


@contextlib.contextmanager
def terminate_as_exit() -> Iterator[None]:
    """Within it, SIGTERM raises SystemExit, so `with`/`finally` clean-ups run."""

    def on_term(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    """`router FD_A FD_B`, the router process `Emulator.start` runs."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["router"]:
        return _router_main(args[1:])
    print("usage: python -m bench.paths.emu router FD_A FD_B", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
