"""The listener's answer to a listing request: its streams, each key seeing its own.

Why it exists: `purelink streams tcp://HOST:PORT` asks a listener for its
streams (protocol/tail_list.py).  The subscription server (server.py)
decodes the request, opens the encrypted layer and holds the slot as for a
subscription; this module builds the reply: one STREAM item per stream the
key may read (every stream without keys), then END, in pieces of at most
`tail_seal.CHUNK` bytes (one sealed frame each).
"""

from __future__ import annotations

from ...protocol.keys import KeyTable
from ...protocol.tail import END, encode_control
from ...protocol.tail_list import ListedStream, encode_stream
from .out import Out
from .source import Refused, TailSource

__all__ = ["send_listing"]

_PIECE = 64 << 10  # tail_seal.CHUNK: a sealed frame's plaintext at most


def send_listing(out: Out, source: TailSource, keys: KeyTable | None, key_id: str | None) -> int:
    """Send the streams of `source` that key `key_id` may read (every one when the
    request was not sealed: `key_id` None), then END; return how many were listed."""
    may_read = _everything
    if key_id is not None:
        key = None if keys is None else keys.get(key_id)
        if key is None:  # removed by a reload since the request opened
            raise Refused("tail_key_revoked", "key revoked")
        may_read = key.may_read
    pieces: list[bytes] = []
    held = 0
    listed = 0
    for info in source.streams():
        if not may_read(info.name):
            continue
        item = encode_stream(
            ListedStream(
                info.name,
                info.first,
                info.last,
                info.records,
                info.bytes,
                round(info.last_time * 1000) if info.last_time is not None else 0,
            )
        )
        if held + len(item) > _PIECE:
            out.send(b"".join(pieces))
            pieces, held = [], 0
        pieces.append(item)
        held += len(item)
        listed += 1
    pieces.append(encode_control(END))
    out.send(b"".join(pieces))
    return listed


def _everything(stream: str) -> bool:
    return True
