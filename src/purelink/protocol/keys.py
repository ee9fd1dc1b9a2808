"""The listener's keys: who may open a link or a subscription, to which streams.

Why it exists: one shared secret that grants everything is the gap
`--keys-file` closes (docs/security.md, "Keys, permissions and rotation").
This module is the file's parser and the table it yields; the handshake
(secure_core.py) looks a key up by the id an INIT names and asks it about
the stream of the HELLO inside.

The file, one key per line (docs/security.md has an example):

    # comment lines and blank lines are ignored; so is anything after " #"
    ID  BASE64-SECRET  PATTERN[,PATTERN...]  [expires=YYYY-MM-DDTHH:MM:SSZ]

* ID: 1-64 characters of `[A-Za-z0-9._-]`, each ID once;
* the secret: standard base64 of at least 16 bytes (`head -c 32
  /dev/urandom | base64`);
* a pattern is an fnmatch glob over stream names (`orders-*`, `*` = all)
  and grants writing (links) and reading (subscriptions); `read:GLOB` or
  `write:GLOB` grants only one of them;
* `expires=`: after that UTC time the key opens nothing (refused "expired
  key"); sessions it opened before are ended at the next reload.

A file that anyone but its owner and group may read, or that its group may
write, is refused: it holds secrets, and whoever may write it grants keys.
Every error is one line naming the file and the line.  The table is
immutable; a reload (SIGHUP) builds a new one and swaps the reference.

`--secret-file` is the same thing with one key: id "" (empty), pattern `*`.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Final

__all__ = ["Key", "KeyTable", "KeysFileError", "load_keys_file", "parse_keys"]

_ID_RE: Final = re.compile(r"[A-Za-z0-9._-]{1,64}")
MIN_SECRET: Final = 16


class KeysFileError(ValueError):
    """A keys file that cannot be used; the message is one line naming the line."""


@dataclass(frozen=True, slots=True)
class Key:
    """One key of the table."""

    key_id: str
    """Its id, named by a link's INIT ("" for the one key of --secret-file)."""
    secret: bytes
    """The pre-shared secret."""
    write: tuple[str, ...] = ("*",)
    """Globs of the streams it may write (open links to)."""
    read: tuple[str, ...] = ("*",)
    """Globs of the streams it may read (subscribe to)."""
    expires: float | None = None
    """Unix time from which it opens nothing; None = never."""

    def may_write(self, stream: str) -> bool:
        """Whether a link under this key may write `stream`."""
        return any(fnmatchcase(stream, p) for p in self.write)

    def may_read(self, stream: str) -> bool:
        """Whether a subscription under this key may read `stream`."""
        return any(fnmatchcase(stream, p) for p in self.read)

    def expired(self, wall: float) -> bool:
        """Whether the key has expired at Unix time `wall`."""
        return self.expires is not None and wall >= self.expires


class KeyTable:
    """Keys by id; immutable (swap the whole table to change it)."""

    __slots__ = ("_keys",)

    def __init__(self, keys: list[Key] | tuple[Key, ...] = ()) -> None:
        self._keys = {k.key_id: k for k in keys}

    @classmethod
    def single(cls, secret: bytes) -> KeyTable:
        """The table of a plain secret: key "" may do everything."""
        if len(secret) < MIN_SECRET:
            raise ValueError(f"secret must be at least {MIN_SECRET} bytes")
        return cls([Key("", secret)])

    def get(self, key_id: str) -> Key | None:
        """The key of that id, or None."""
        return self._keys.get(key_id)

    def __len__(self) -> int:
        return len(self._keys)

    def ids(self) -> list[str]:
        """Every key id, sorted."""
        return sorted(self._keys)


def _expiry(text: str, where: str) -> float:
    value = text.removeprefix("expires=")
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise KeysFileError(f"{where}: bad expires={value!r} (want YYYY-MM-DDTHH:MM:SSZ)") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _parse_line(fields: list[str], where: str) -> Key:
    if len(fields) < 3 or len(fields) > 4:
        raise KeysFileError(f"{where}: want 'ID BASE64-SECRET PATTERN[,PATTERN...] [expires=T]'")
    key_id, secret_text, patterns = fields[:3]
    if not _ID_RE.fullmatch(key_id):
        raise KeysFileError(f"{where}: key id {key_id!r} is not 1-64 of [A-Za-z0-9._-]")
    try:
        secret = base64.b64decode(secret_text, validate=True)
    except (binascii.Error, ValueError):
        raise KeysFileError(f"{where}: the secret of {key_id!r} is not base64") from None
    if len(secret) < MIN_SECRET:
        raise KeysFileError(
            f"{where}: the secret of {key_id!r} is {len(secret)} bytes, at least {MIN_SECRET}"
        )
    write: list[str] = []
    read: list[str] = []
    for pattern in patterns.split(","):
        kind, _, glob = pattern.rpartition(":")
        if not glob or kind not in ("", "read", "write"):
            raise KeysFileError(f"{where}: bad pattern {pattern!r} (GLOB, read:GLOB or write:GLOB)")
        if kind != "read":
            write.append(glob)
        if kind != "write":
            read.append(glob)
    expires = None
    if len(fields) == 4:
        if not fields[3].startswith("expires="):
            raise KeysFileError(f"{where}: unknown field {fields[3]!r} (only expires=)")
        expires = _expiry(fields[3], where)
    return Key(key_id, secret, tuple(write), tuple(read), expires)


def parse_keys(text: str, name: str = "keys file") -> KeyTable:
    """The table of a keys file's text; KeysFileError naming the line if it is bad."""
    keys: list[Key] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        where = f"{name}, line {number}"
        key = _parse_line(line.split(), where)
        if key.key_id in seen:
            raise KeysFileError(
                f"{where}: key id {key.key_id!r} again (first on line {seen[key.key_id]})"
            )
        seen[key.key_id] = number
        keys.append(key)
    if not keys:
        raise KeysFileError(f"{name}: no keys in it")
    return KeyTable(keys)


def load_keys_file(path: str | os.PathLike[str]) -> KeyTable:
    """Read and parse a keys file, refusing one that others may read."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            data = f.read()
    except OSError as exc:
        raise KeysFileError(f"cannot read keys file {str(p)!r}: {exc.strerror}") from None
    if mode & (stat.S_IROTH | stat.S_IWOTH | stat.S_IWGRP):
        raise KeysFileError(
            f"keys file {str(p)!r} may be read or written by anyone, or written by "
            f"its group (mode "
            f"{stat.S_IMODE(mode):04o}): chmod 600 it"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise KeysFileError(f"keys file {str(p)!r} is not UTF-8 text") from None
    return parse_keys(text, f"keys file {str(p)!r}")
