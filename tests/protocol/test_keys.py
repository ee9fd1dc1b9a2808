"""The keys file (protocol/keys.py): its parser, its permissions, its checks.

Each bad line is a one-line KeysFileError naming the file and the line; a
file others may read is refused; globs grant writing and reading, `read:` and
`write:` one of them; `expires=` ends a key.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from purelink.protocol.keys import KeysFileError, KeyTable, load_keys_file, parse_keys

S = base64.b64encode(b"k" * 32).decode()


def test_a_keys_file_parses() -> None:
    table = parse_keys(
        f"# the keys\n\napp {S} orders-*,read:audit\n"
        f"ops {S} * expires=2030-01-01T00:00:00Z  # all, for a while\n"
        f"feed {S} write:ingest.*\n"
    )
    assert table.ids() == ["app", "feed", "ops"]
    app, ops, feed = table.get("app"), table.get("ops"), table.get("feed")
    assert app is not None and ops is not None and feed is not None
    assert app.secret == b"k" * 32
    assert app.may_write("orders-eu") and app.may_read("orders-eu")
    assert not app.may_write("audit") and app.may_read("audit")
    assert not app.may_write("payments") and not app.may_read("payments")
    assert feed.may_write("ingest.x") and not feed.may_read("ingest.x")
    assert ops.may_write("anything") and ops.may_read("anything")
    assert not ops.expired(1.7e9) and ops.expired(1.9e9)
    assert table.get("nobody") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("app\n", "line 1: want"),
        (f"# c\nbad/id {S} *\n", "line 2: key id 'bad/id'"),
        ("app !!!! *\n", "line 1: the secret of 'app' is not base64"),
        (f"app {base64.b64encode(b'short').decode()} *\n", "is 5 bytes, at least 16"),
        (f"app {S} sales:x\n", "line 1: bad pattern 'sales:x'"),
        (f"app {S} *\napp {S} *\n", "line 2: key id 'app' again (first on line 1)"),
        (f"app {S} * expires=soon\n", "bad expires='soon'"),
        (f"app {S} * colour=red\n", "unknown field 'colour=red'"),
        ("# nothing\n", "no keys in it"),
    ],
)
def test_bad_lines_are_one_line_errors_naming_the_line(text: str, message: str) -> None:
    with pytest.raises(KeysFileError) as info:
        parse_keys(text, "keys file 'k'")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_file_others_may_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text(f"app {S} *\n")
    path.chmod(0o644)
    with pytest.raises(KeysFileError, match="chmod 600"):
        load_keys_file(path)
    path.chmod(0o640)
    assert load_keys_file(path).ids() == ["app"]


def test_a_file_its_group_may_write_is_refused(tmp_path: Path) -> None:
    """Group members who may write the file could give themselves a key to every
    stream at the next SIGHUP; reading it is the group's business (0640 is fine)."""
    path = tmp_path / "keys"
    path.write_text(f"app {S} *\n")
    for mode in (0o660, 0o620, 0o602):
        path.chmod(mode)
        with pytest.raises(KeysFileError, match="chmod 600"):
            load_keys_file(path)


def test_an_expiry_at_the_epoch_is_an_expiry() -> None:
    """0 meant "never": a key given expires=1970-01-01T00:00:00Z never expired."""
    table = parse_keys(f"app {S} * expires=1970-01-01T00:00:00Z\n")
    key = table.get("app")
    assert key is not None and key.expired(1.7e9)
    forever = parse_keys(f"app {S} *\n").get("app")
    assert forever is not None and not forever.expired(1.0e12)


def test_a_missing_file_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(KeysFileError, match="cannot read keys file"):
        load_keys_file(tmp_path / "nope")


def test_a_plain_secret_is_one_key_that_may_do_everything() -> None:
    table = KeyTable.single(b"x" * 16)
    key = table.get("")
    assert key is not None and key.may_write("a") and key.may_read("b")
    with pytest.raises(ValueError, match="at least 16"):
        KeyTable.single(b"short")
