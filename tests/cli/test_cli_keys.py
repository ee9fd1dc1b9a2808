"""`purelink serve --keys-file`, `send/tail --key-id` and SIGHUP, as a user runs them.

A real `purelink serve` child: a keys file that others may read, or with a
bad line, is a one-line error (exit 2); a key writes and reads only its
streams, refused with the reason otherwise (exit 1, one line); SIGHUP
reloads the file (a new key works at once) and a bad reload keeps the keys
in use and says why.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from helpers.cli import TIMEOUT, assert_one_line_error, keys_file, line, read_line, run, serving

APP = b"a" * 32
NEW = b"n" * 32


def secret_file(tmp_path: Path, name: str, secret: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(secret)
    path.chmod(0o600)
    return path


def test_a_keys_file_others_may_read_is_refused(tmp_path: Path) -> None:
    keys = keys_file(tmp_path, line("app", APP, "*"), 0o644)
    err = assert_one_line_error(
        run("serve", "--data", str(tmp_path / "d"), "--keys-file", str(keys)), 2
    )
    assert "chmod 600" in err


def test_a_bad_line_is_refused_naming_it(tmp_path: Path) -> None:
    keys = keys_file(tmp_path, "# ok\n" + line("app", APP, "*") + "app2 no!pe *\n")
    err = assert_one_line_error(
        run("serve", "--data", str(tmp_path / "d"), "--keys-file", str(keys)), 2
    )
    assert "line 3" in err and "not base64" in err


def test_key_id_needs_a_secret_file(tmp_path: Path) -> None:
    err = assert_one_line_error(
        run("send", "udp://127.0.0.1:9", "--stream", "s", "--key-id", "x"), 2
    )
    assert "--key-id needs --secret-file" in err


def test_keys_permissions_and_sighup(tmp_path: Path) -> None:
    keys = keys_file(tmp_path, line("app", APP, "orders-*"))
    app = secret_file(tmp_path, "app.key", APP)
    new = secret_file(tmp_path, "new.key", NEW)
    data = tmp_path / "data"
    with serving(
        data, "--udp", "127.0.0.1:0", "--tcp", "127.0.0.1:0", "--keys-file", str(keys)
    ) as srv:
        tcp = "tcp://" + srv.line.split("tcp=")[1].split()[0]

        def send(stream: str, key_id: str, key: Path, text: bytes = b"a\nb\n") -> object:
            return run(
                "send", srv.url, "--stream", stream, "--key-id", key_id, "--secret-file", str(key),
                "--timeout", "5", stdin=text,
            )  # fmt: skip

        ok = send("orders-1", "app", app)
        assert ok.returncode == 0, ok.stderr  # type: ignore[attr-defined]
        err = assert_one_line_error(send("payments", "app", app), 1)  # type: ignore[arg-type]
        assert "forbidden" in err
        err = assert_one_line_error(send("orders-1", "new", new), 1)  # type: ignore[arg-type]
        assert "unknown key id" in err
        got = run("tail", tcp, "--stream", "orders-1", "--key-id", "app", "--secret-file", str(app))
        assert got.returncode == 0 and got.stdout == b"a\nb\n", got.stderr
        # SIGHUP: a new key works at once
        keys.write_text(line("app", APP, "orders-*") + line("new", NEW, "payments"))
        srv.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 20
        while (result := send("payments", "new", new)).returncode != 0:  # type: ignore[attr-defined]
            assert time.monotonic() < deadline, result
            time.sleep(0.1)
        # a bad file: the keys in use stay -- once serve has said it read it
        keys.write_text("broken\n")
        srv.proc.send_signal(signal.SIGHUP)
        assert srv.proc.stderr is not None
        said = ""
        while "reload failed" not in said:
            said += read_line(srv.proc.stderr.fileno(), TIMEOUT).decode()
        again = send("payments", "new", new, b"c\n")
        assert again.returncode == 0, again.stderr  # type: ignore[attr-defined]
        code, rest = srv.stop()
        stderr = said + rest
    assert code == 0, stderr
    assert "keys reloaded (2 keys)" in stderr
    assert "reload failed, the keys in use stay" in stderr and "line 1" in stderr
