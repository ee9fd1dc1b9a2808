"""The store: append-only segment files of batches, one folder per stream.

`DataDir` and `StreamLog` are the listener's writer side; `Store` is the
public read-only view.  The layout and recovery rules are in docs/store.md.
"""

from __future__ import annotations

from .format import ProducerState
from .log import StreamLog
from .store import STREAM_NAME_RE, DataDir, Store, StreamInfo, validate_stream_name

__all__ = [
    "STREAM_NAME_RE",
    "DataDir",
    "ProducerState",
    "Store",
    "StreamInfo",
    "StreamLog",
    "validate_stream_name",
]
