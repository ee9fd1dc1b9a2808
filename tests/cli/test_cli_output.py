"""What `read`, `tail` and `streams` print for pipes, run as a user runs them.

`--format json` is one JSON object per line, the payload as text when it is
UTF-8 and as `payload_base64` when it is not; `streams --format json`; `tail
--to`; a stream that does not exist said on stderr (exit 0, or 1 with
--must-exist); `streams tcp://HOST:PORT` against a real `purelink serve`,
with and without keys (a key lists only the streams it may read).
"""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from helpers.cli import Server, assert_one_line_error, keys_file, line, run, serving
from purelink.testing.ports import free_port

APP = b"a" * 32
AUDIT = b"b" * 32
WRONG = b"w" * 32

LOG_RECORDS = [b'{"level": "info", "msg": "caf\xc3\xa9"}', b'{"level": "warn", "n": 2}']
BINARY = [b"\xff\xfe\x00\x01", b"\x80", b"plain"]


def tcp_url(server: Server) -> str:
    return "tcp://" + server.line.split("tcp=")[1].split()[0]


def send(server: Server, stream: str, records: list[bytes], *extra: str) -> None:
    sent = run("send", tcp_url(server), "--stream", stream, *extra, stdin=b"\n".join(records))
    assert sent.returncode == 0, sent.stderr


def json_lines(result: subprocess.CompletedProcess[bytes]) -> list[dict[str, object]]:
    assert result.returncode == 0, result.stderr
    return [json.loads(row) for row in result.stdout.decode("utf-8").splitlines()]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with serving(tmp_path / "data", "--udp", "127.0.0.1:0", "--tcp", "127.0.0.1:0") as srv:
        send(srv, "app-logs", LOG_RECORDS)
        send(srv, "blobs", BINARY)
        yield srv


def test_json_gives_text_payloads_as_text_and_others_as_base64(server: Server) -> None:
    data = str(server.data)
    for verb in (["read", "--data", data], ["tail", tcp_url(server)]):
        rows = json_lines(run(*verb, "--stream", "app-logs", "--format", "json"))
        times = [r.pop("time", None) for r in rows]  # read says when each was stored
        if verb[0] == "read":
            assert all(datetime.fromisoformat(str(t)).tzinfo == UTC for t in times), times
        else:  # a subscription carries no times
            assert times == [None, None]
        assert rows == [
            {"position": 1, "payload": LOG_RECORDS[0].decode()},
            {"position": 2, "payload": LOG_RECORDS[1].decode()},
        ], verb
        # what `| jq .payload | fromjson` does: the records themselves, parsed
        assert [json.loads(str(r["payload"]))["level"] for r in rows] == ["info", "warn"]

        rows = json_lines(run(*verb, "--stream", "blobs", "--format", "json"))
        for r in rows:
            r.pop("time", None)
        assert [r["position"] for r in rows] == [1, 2, 3]
        assert [set(r) for r in rows] == [
            {"position", "payload_base64"},
            {"position", "payload_base64"},
            {"position", "payload"},
        ]
        back = [base64.b64decode(str(r["payload_base64"])) for r in rows[:2]]
        assert [*back, str(rows[2]["payload"]).encode()] == BINARY


def test_streams_table_and_json(server: Server) -> None:
    data = str(server.data)
    rows = json_lines(run("streams", "--data", data, "--format", "json"))
    assert [(r["stream"], r["first"], r["last"], r["records"]) for r in rows] == [
        ("app-logs", 1, 2, 2),
        ("blobs", 1, 3, 3),
    ]
    assert all(isinstance(r["bytes"], int) and r["bytes"] > 0 for r in rows)
    table = run("streams", "--data", data)
    assert table.returncode == 0, table.stderr
    cells = [row.split() for row in table.stdout.decode().splitlines()]
    assert cells[0] == ["stream", "first", "last", "records", "bytes", "last", "stored"]
    assert all(datetime.fromisoformat(c[5]).tzinfo == UTC for c in cells[1:]), cells
    assert [c[:4] for c in cells[1:]] == [["app-logs", "1", "2", "2"], ["blobs", "1", "3", "3"]]
    # the same, asked of the listener over its TCP port
    url = tcp_url(server)
    assert json_lines(run("streams", url, "--format", "json")) == rows
    assert json_lines(run("streams", "--data", url, "--format", "json")) == rows


def test_tail_to_ends_once_it_printed_that_position(server: Server) -> None:
    url = tcp_url(server)
    out = run("tail", url, "--stream", "blobs", "--from", "2", "--to", "2")
    assert (out.returncode, out.stdout) == (0, b"\x80\n")
    # with --follow it ends too, at --to, without waiting for more
    out = run("tail", url, "--stream", "app-logs", "--to", "1", "--follow", "--timeout", "5")
    assert (out.returncode, out.stdout) == (0, LOG_RECORDS[0] + b"\n")
    # --to past the end without --follow: what is there
    out = run("tail", url, "--stream", "app-logs", "--to", "99")
    assert (out.returncode, out.stdout) == (0, b"\n".join(LOG_RECORDS) + b"\n")
    err = assert_one_line_error(run("tail", url, "--stream", "s", "--from", "3", "--to", "2"), 2)
    assert "--to 2 is before --from 3" in err


def test_an_unknown_stream_is_said_on_stderr(server: Server) -> None:
    data, url = str(server.data), tcp_url(server)
    for verb, where in ((["read", "--data", data], f"in {data}"), (["tail", url], f"at {url}")):
        out = run(*verb, "--stream", "ordrs")
        assert (out.returncode, out.stdout) == (0, b""), out.stderr
        name = verb[0]
        assert out.stderr.decode() == f"purelink {name}: no stream 'ordrs' {where}\n"
        out = run(*verb, "--stream", "ordrs", "--must-exist")
        assert (out.returncode, out.stdout) == (1, b"")
        assert out.stderr.decode() == f"purelink {name}: no stream 'ordrs' {where}\n"
        # a stream that exists says nothing, with or without --must-exist
        out = run(*verb, "--stream", "blobs", "--from", "3", "--must-exist")
        assert (out.returncode, out.stdout, out.stderr) == (0, b"plain\n", b"")
    # a follower of a stream that is not there: --must-exist fails at once
    for verb in (["read", "--data", data], ["tail", url]):
        out = run(*verb, "--stream", "ordrs", "--follow", "--must-exist", timeout=30)
        assert (out.returncode, out.stdout) == (1, b""), out.stderr
        assert "no stream 'ordrs'" in out.stderr.decode()


def test_streams_arguments(server: Server) -> None:
    data, url = str(server.data), tcp_url(server)
    for args, says in [
        (["streams"], "needs --data"),
        (["streams", url, "--data", data], "not both"),
        (["streams", "udp://127.0.0.1:9"], "tcp://"),
        (["streams", "--data", data, "--key-id", "k", "--secret-file", "f"], "tcp:// URL"),
        (["streams", "--data", data, "--format", "xml"], "invalid choice"),
    ]:
        assert says in assert_one_line_error(run(*args), 2), args


def test_streams_of_an_unreachable_listener_is_one_line_exit_1(tmp_path: Path) -> None:
    port = free_port()
    err = assert_one_line_error(run("streams", f"tcp://127.0.0.1:{port}", "--timeout", "2"), 1)
    assert "cannot reach" in err


def test_streams_over_tcp_with_keys_lists_what_each_key_may_read(tmp_path: Path) -> None:
    keys = keys_file(
        tmp_path,
        line("app", APP, "app-*") + line("audit", AUDIT, "*"),
    )
    app_key, audit_key, wrong_key = (tmp_path / n for n in ("app.key", "audit.key", "wrong.key"))
    for path, secret in ((app_key, APP), (audit_key, AUDIT), (wrong_key, WRONG)):
        path.write_bytes(secret)
        path.chmod(0o600)
    data = tmp_path / "data"
    with serving(data, "--tcp", "127.0.0.1:0", "--no-udp", "--keys-file", str(keys)) as srv:
        url = tcp_url(srv)
        for stream in ("app-a", "app-b", "payroll"):  # the app key may not read payroll
            send(srv, stream, [b"x"], "--key-id", "audit", "--secret-file", str(audit_key))
        keyed = ("--key-id", "app", "--secret-file", str(app_key))
        rows = json_lines(run("streams", url, "--format", "json", *keyed))
        assert [r["stream"] for r in rows] == ["app-a", "app-b"]

        audit = ("--key-id", "audit", "--secret-file", str(audit_key))
        rows = json_lines(run("streams", url, "--format", "json", *audit))
        assert [(r["stream"], r["records"]) for r in rows] == [
            ("app-a", 1),
            ("app-b", 1),
            ("payroll", 1),
        ]

        err = assert_one_line_error(
            run("streams", url, "--key-id", "app", "--secret-file", str(wrong_key)), 1
        )
        assert "wrong secret" in err
        err = assert_one_line_error(run("streams", url), 1)  # no key: refused
        assert "refused" in err
        err = assert_one_line_error(
            run("streams", url, "--key-id", "nobody", "--secret-file", str(app_key)), 1
        )
        assert "nobody" in err
