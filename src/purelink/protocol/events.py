"""What the sans-IO state machines hand out to their drivers.

Small frozen dataclasses, one per thing that happened, in the style of
aioquic's and h11's events: the driver reads them and acts (tell the owner,
raise into the application, reconnect); the state machine never calls out.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Connected", "Event", "Failed", "Fenced", "Held", "Reconnecting", "StoredAdvanced"]


@dataclass(frozen=True, slots=True)
class Connected:
    """The handshake completed (first connect or a reconnect)."""

    producer: int
    """The producer id the listener knows us by."""
    epoch: int
    """This session's epoch."""
    stored: int
    """The producer's last stored seq on the stream, as the listener reported it."""
    max_record: int = 16 << 20
    """The largest record the listener accepts."""


@dataclass(frozen=True, slots=True)
class StoredAdvanced:
    """The listener said more records are stored."""

    stored: int
    """The new last stored seq."""


@dataclass(frozen=True, slots=True)
class Reconnecting:
    """The session was lost; the sender is doing a new handshake and keeps every record."""

    reason: str
    """Why: "unknown" (the listener forgot us, e.g. it restarted) or "silent" (no answers)."""


@dataclass(frozen=True, slots=True)
class Fenced:
    """A newer session of the same named producer took over: this link is done."""

    epoch: int
    """Our (now stale) epoch."""


@dataclass(frozen=True, slots=True)
class Held:
    """The listener refused the link for now (its disk is full): the link waits
    and tries again; said once per episode, until it is storing again."""

    reason: str
    """The refusal's name ("disk_full")."""


@dataclass(frozen=True, slots=True)
class Failed:
    """The link cannot go on and must fail loudly."""

    kind: str
    """"refused" (handshake refused), "lost" (the listener lost told records), "conflict"."""
    message: str
    """One line for the application."""
    permanent: bool = False
    """Trying again cannot help (messages.RefuseReason.PERMANENT)."""


Event = Connected | StoredAdvanced | Reconnecting | Fenced | Held | Failed
