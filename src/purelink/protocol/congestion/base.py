"""The congestion controller's interface: what the sender tells it, what it answers.

Why an ABC of its own: the sender must not know which algorithm runs (a small
injectable policy, after aioquic's `quic/congestion/base.py`).  It builds one with
`create(name, datagram_size, seed)`, tells it about every transmission, every
answer (as one `RateSample`), every loss, every proven-spurious loss and every
probe timeout, and reads two numbers back:

* `cwnd`: bytes that may be in flight (the sender also keeps under the
  listener's advertised window);
* `pacing_rate`: bytes per second at which to release them (0: no pacing,
  release as the window allows).

The algorithm (written out in each module's docstring):

    on every transmission:   on_sent(size, now, in_flight)
    on every answer:         on_ack(sample, now)      # after losses of that answer
    on every loss:           on_lost(sent_time, size, now)
    a loss proven spurious:  on_spurious(sent_time, now)   # undo its reduction
    a probe went unanswered: on_timeout(now)          # the path may be gone

A sample taken while the sender had nothing more to send says so
(`RateSample.is_app_limited`): that is how a controller learns of it.

What it shows (`statistics()`, read into `link.stats()` and the metrics): the
four that every controller has (`name`, `state`, `cwnd`, `pacing_rate`) and
three that a controller has only if it keeps them, read by name so that no
policy has to carry what it does not know:

* `btl_bw`: its estimate of the bottleneck's bandwidth, bytes/s (BBR's model);
* `min_rtt`: the smallest round trip it has seen, seconds;
* `competing`: whether it believes other traffic shares its bottleneck;
* `cross_traffic`: what it believes that traffic is ("none", "loss": a
  loss-based flow such as CUBIC, "model": a model-based one such as BBR v1;
  bbr.py competes accordingly, crosstraffic.py judges).

Without them a snapshot says None: not measured, never a made-up zero or no.

A controller never reads a clock and never sees a datagram: only sizes and times.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

__all__ = ["CongestionControl", "CongestionStatistics", "RateSample"]


@dataclass(slots=True)
class RateSample:
    """What one answer says, for the congestion controller
    (draft-cheng-iccrg-delivery-rate-estimation section 3)."""

    delivery_rate: float = 0.0
    """Bytes per second delivered over the sample's interval; 0 when no valid sample."""
    delivered: int = 0
    """Bytes delivered over that interval."""
    interval: float = 0.0
    """The interval, seconds: max(send elapsed, ack elapsed)."""
    rtt: float = 0.0
    """RTT of the most recently sent datagram this answer covered (0: none)."""
    prior_delivered: int = 0
    """The connection's delivered count when that datagram was sent."""
    is_app_limited: bool = False
    """That datagram was sent while the sender had too little to send to fill
    its window: a low rate then says nothing about the path."""
    newly_acked: int = 0
    """Bytes this answer acknowledged."""
    newly_lost: int = 0
    """Bytes this answer declared lost."""
    last_sent: float = -1.0
    """Send time of the most recently sent datagram this answer acknowledged."""
    prior_in_flight: int = 0
    """Bytes in flight before the answer."""
    in_flight: int = 0
    """Bytes in flight after it."""
    total_delivered: int = 0
    """Bytes delivered over the connection's life, after this answer."""


@dataclass(frozen=True, slots=True)
class CongestionStatistics:
    """A snapshot of what a congestion controller believes about its path."""

    name: str
    """The controller, as `create` (and `connect(congestion=...)`) names it."""
    state: str
    """Its phase: BBR's "startup", "drain", "probe_bw", "probe_rtt"; CUBIC's and
    NewReno's "slow_start", "congestion_avoidance", "recovery"."""
    cwnd: int
    """Bytes that may be in flight."""
    pacing_rate: float
    """Bytes per second at which it sends (0.0: no pacing, or no estimate yet)."""
    btl_bw: float | None
    """Estimated bottleneck bandwidth, bytes/s: 0.0 before the first sample; None
    for a controller that keeps no such estimate."""
    min_rtt: float | None
    """The smallest round trip it has seen (BBR: within its 10 s window), seconds:
    0.0 before the first sample; None for a controller that does not track it."""
    competing: bool | None
    """Whether it believes other traffic shares its bottleneck (None for a
    controller that cannot tell)."""
    cross_traffic: str | None = None
    """What it believes that traffic is: "none", "loss" (loss-based, such as
    CUBIC) or "model" (model-based, such as BBR v1); None for a controller
    that cannot tell."""


class CongestionControl(ABC):
    """How much may be in flight, and how fast to release it."""

    name: str = ""
    cwnd: int
    """Bytes that may be in flight."""
    pacing_rate: float = 0.0
    """Bytes per second at which to send (0: no pacing)."""

    def __init__(self, datagram_size: int) -> None:
        self.datagram_size = datagram_size
        self.losses = 0
        """Datagrams reported lost."""
        self.undos = 0
        """Reductions undone because the loss proved spurious."""

    def on_sent(self, size: int, now: float, in_flight: int) -> None:  # noqa: B027 - optional
        """A datagram of `size` bytes went out; `in_flight` counts it already."""

    @abstractmethod
    def on_ack(self, sample: RateSample, now: float) -> None:
        """An answer acknowledged (and possibly declared lost) datagrams."""

    @abstractmethod
    def on_lost(self, sent_time: float, size: int, now: float) -> None:
        """A datagram sent at `sent_time` was declared lost at `now`."""

    @abstractmethod
    def on_spurious(self, sent_time: float, now: float) -> None:
        """The loss of the datagram sent at `sent_time` was spurious."""

    def on_path_rtt(self, rtt: float, now: float) -> None:  # noqa: B027 - optional
        """A round trip timed outside the data (the handshake's), seconds."""

    @abstractmethod
    def on_timeout(self, now: float) -> None:
        """Probes went unanswered: the path may be gone."""

    @property
    def minimum(self) -> int:
        """The smallest window, bytes."""
        return 2 * self.datagram_size

    @property
    def state(self) -> str:
        """A name for the controller's phase (stats, logs)."""
        return self.name

    def statistics(self) -> CongestionStatistics:
        """A snapshot of the controller's view of the path (see the module docstring).

        It only reads attributes, each of them whole, so another thread may call it
        while the sender's thread feeds the controller (as `link.stats()` does); the
        figures are each current, not taken at one instant together."""
        btl_bw = getattr(self, "btl_bw", None)
        min_rtt = getattr(self, "min_rtt", None)
        competing = getattr(self, "competing", None)
        cross = getattr(self, "cross_traffic", None)
        return CongestionStatistics(
            name=self.name,
            state=self.state,
            cwnd=self.cwnd,
            pacing_rate=self.pacing_rate,
            btl_bw=None if btl_bw is None else float(btl_bw),
            min_rtt=None if min_rtt is None else float(min_rtt),
            competing=None if competing is None else bool(competing),
            cross_traffic=None if cross is None else str(cross),
        )
