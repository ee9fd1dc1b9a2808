"""`purelink serve`'s own logs, as an operator ships them (cli/logs.py).

A real `purelink serve` child each time: every text line starts with an
ISO-8601 UTC time, `--log-format json` gives one object per line with the
record's fields, `--log-level` hides what is below it, a bad value is a
one-line error, a SIGHUP key reload is said once, and the stop is one human
line (its counters ride in the JSON record).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from helpers.cli import TIMEOUT, assert_one_line_error, keys_file, line, read_line, run, serving
from purelink.cli.logs import duration, stop_summary
from purelink.listener.stats import ListenerStats

STOPPED = re.compile(
    r"stopped after (\d+(\.\d)?s|(\d+[dhm])+\d+s): 3 records stored in 1 stream; 0 dropped"
)


def utc(text: str) -> datetime.datetime:
    """`text` as an ISO-8601 time, which must be UTC."""
    moment = datetime.datetime.fromisoformat(text)
    assert moment.utcoffset() == datetime.timedelta(0), text
    return moment


def test_text_lines_start_with_a_utc_time_and_the_stop_is_one_human_line(
    tmp_path: Path,
) -> None:
    before = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1)
    with serving(tmp_path / "data", "--udp", "127.0.0.1:0") as srv:
        sent = run("send", srv.url, "--stream", "s", stdin=b"a\nb\nc\n")
        assert sent.returncode == 0, sent.stderr
        code, err = srv.stop(signal.SIGINT)
    after = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)
    assert code == 0, err
    lines = err.splitlines()
    assert lines, "serve said nothing"
    for text in lines:
        stamp, level, rest = text.split(" ", 2)
        assert before <= utc(stamp) <= after, text
        assert level in {"DEBUG", "INFO", "WARNING", "ERROR"}, text
        assert rest.startswith("purelink."), text
    stopped = [text.split(" ", 2)[2] for text in lines if "stopped after" in text]
    assert len(stopped) == 1, err
    logger, _, message = stopped[0].partition(": ")
    assert logger == "purelink.serve"
    assert STOPPED.fullmatch(message), message


def json_lines(err: str) -> list[dict[str, Any]]:
    records = [json.loads(text) for text in err.splitlines()]
    assert all(isinstance(r, dict) for r in records), err
    return records


def test_json_lines_carry_the_fields_and_the_stop_counters(tmp_path: Path) -> None:
    with serving(tmp_path / "data", "--udp", "127.0.0.1:0", "--log-format", "JSON") as srv:
        sent = run("send", srv.url, "--stream", "s", stdin=b"a\nb\nc\n")
        assert sent.returncode == 0, sent.stderr
        code, err = srv.stop()
    assert code == 0, err
    records = json_lines(err)
    for record in records:
        assert {"time", "level", "logger", "message", "thread"} <= record.keys(), record
        utc(record["time"])
    stops = [r for r in records if "stats" in r]
    assert len(stops) == 1, err
    stop = stops[0]
    assert (stop["logger"], stop["level"]) == ("purelink.serve", "INFO")
    assert STOPPED.fullmatch(stop["message"]), stop
    assert stop["stats"]["records_stored"] == 3
    assert stop["stats"]["stream_records"] == {"s": 3}
    assert stop["stats"]["dropped"] == {}


def test_log_level_warning_hides_info_lines(tmp_path: Path) -> None:
    with serving(tmp_path / "data", "--udp", "127.0.0.1:0", "--log-level", "WARNING") as srv:
        assert srv.proc.stderr is not None
        srv.proc.send_signal(signal.SIGHUP)  # without keys: a warning
        said = read_line(srv.proc.stderr.fileno(), TIMEOUT).decode()
        code, rest = srv.stop()
    assert code == 0, rest
    assert " WARNING purelink.serve: SIGHUP ignored" in said, said
    assert rest == "", "nothing under WARNING: no stop line either"


@pytest.mark.parametrize(
    ("flag", "value"), [("--log-format", "xml"), ("--log-level", "loud"), ("--log-level", "")]
)
def test_a_bad_log_option_is_one_line(tmp_path: Path, flag: str, value: str) -> None:
    err = assert_one_line_error(run("serve", "--data", str(tmp_path / "d"), flag, value), 2)
    assert flag in err and "invalid choice" in err
    assert not (tmp_path / "d").exists()


def test_a_key_reload_is_logged_once(tmp_path: Path) -> None:
    keys = keys_file(tmp_path, line("app", b"a" * 32, "*"))
    data = tmp_path / "data"
    args = ("--udp", "127.0.0.1:0", "--keys-file", str(keys), "--log-format", "json")
    with serving(data, *args) as srv:
        assert srv.proc.stderr is not None
        keys.write_text(line("app", b"a" * 32, "*") + line("new", b"n" * 32, "b-*"))
        srv.proc.send_signal(signal.SIGHUP)
        said = ""
        while "keys reloaded" not in said:  # each read waits at most TIMEOUT
            said += read_line(srv.proc.stderr.fileno(), TIMEOUT).decode()
        code, rest = srv.stop()
    assert code == 0, rest
    reloads = [r for r in json_lines(said + rest) if "reload" in r["message"]]
    assert len(reloads) == 1, said + rest
    assert reloads[0]["message"] == "keys reloaded (2 keys); 0 sessions ended"
    assert (reloads[0]["keys"], reloads[0]["sessions_ended"]) == (2, 0)


def test_durations_read_as_people_write_them() -> None:
    assert duration(0.42) == "0.4s"
    assert duration(59.9) == "59s"
    assert duration(723.5) == "12m3s"
    assert duration(5 * 3600 + 7) == "5h0m7s"
    assert duration(2 * 86400 + 3 * 3600 + 4 * 60 + 5) == "2d3h4m5s"


def test_the_stop_summary_counts_streams_written_and_names_the_drops() -> None:
    counters: dict[str, Any] = {
        f.name: 0
        for f in dataclasses.fields(ListenerStats)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    stats = ListenerStats(
        **{**counters, "gro": False, "records_stored": 1_234_567},
        stream_records={"a": 1_234_000, "b": 567, "c": 0},
        dropped={"rate_limit": 4, "read_timeout": 9, "bad_mac": 0},
    )
    assert stop_summary(stats, 723.0) == (
        "stopped after 12m3s: 1,234,567 records stored in 2 streams; "
        "13 dropped (9 read_timeout, 4 rate_limit)"
    )
