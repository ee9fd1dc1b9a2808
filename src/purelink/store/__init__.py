"""The store: append-only segment files of batches, one folder per stream.

`DataDir` and `StreamLog` are the listener's writer side of a data directory;
`Store` is the public read-only view of any store, through a `StoreReader`
(`DataDirReader` here, `JetStreamReader` in jetstream/).  The layout and
recovery rules are in docs/store.md.
"""

from __future__ import annotations

from .datadir import STREAM_NAME_RE, DataDir, validate_stream_name
from .datadir_reader import DataDirReader
from .format import ProducerState
from .log import StreamLog
from .reader import StoreReader, StreamInfo
from .store import Store, open_reader

__all__ = [
    "STREAM_NAME_RE",
    "DataDir",
    "DataDirReader",
    "ProducerState",
    "Store",
    "StoreReader",
    "StreamInfo",
    "StreamLog",
    "open_reader",
    "validate_stream_name",
]
