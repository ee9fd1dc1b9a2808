"""Sizes, durations and the merging of --config, environment and flags, in process.

Why it exists: the parsers are the whole of what `1G`, `1KB` and `1h30m` mean on
the command line (cli/args.py), and `with_config` is what turns a file and the
environment into arguments for any option of a parser (cli/config.py); both are
cheapest to pin down without a process.  The real `purelink serve` runs are in
test_cli_config.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from purelink.cli.args import duration, seconds, size, size_at_least
from purelink.cli.common import UsageError
from purelink.cli.config import env_name, with_config


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("512", 512),
        ("1_000_000", 1_000_000),
        ("512B", 512),
        ("1K", 1024),
        ("1k", 1024),
        ("1KiB", 1024),
        ("1kib", 1024),
        ("1KB", 1000),
        ("1kB", 1000),
        ("64M", 64 << 20),
        ("64MiB", 64 << 20),
        ("500MB", 500_000_000),
        ("1G", 1 << 30),
        ("1 GiB", 1 << 30),
        ("2GB", 2_000_000_000),
        ("1T", 1 << 40),
        ("1TiB", 1 << 40),
        ("1TB", 10**12),
        ("1.5G", 3 << 29),
        (".5K", 512),
        ("1.0001K", 1024),  # rounded down to whole bytes
        (" 10M ", 10 << 20),
    ],
)
def test_a_size_is_bytes_k_m_g_t_1024_based_kb_1000_based(text: str, expected: int) -> None:
    assert size(text) == expected


@pytest.mark.parametrize(
    "text", ["", "K", "-1", "1X", "1e3", "1 K B", "1KiBs", "1P", "one", "1.2.3M", "0x10"]
)
def test_a_bad_size_says_what_a_size_is(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"^not a size: .*KiB"):
        size(text)


def test_a_size_out_of_bounds_names_the_bound() -> None:
    parse = size_at_least(1, 16 << 20)
    assert parse("16M") == 16 << 20
    with pytest.raises(argparse.ArgumentTypeError, match=r"at most 16,777,216 bytes \(16 MiB\)"):
        parse("17M")
    with pytest.raises(argparse.ArgumentTypeError, match="at least 1 bytes"):
        parse("0K")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90", 90.0),
        ("0.5", 0.5),
        ("1_000", 1000.0),
        ("500ms", 0.5),
        ("90s", 90.0),
        ("10m", 600.0),
        ("2h", 7200.0),
        ("7d", 604_800.0),
        ("1.5h", 5400.0),
        ("1h30m", 5400.0),
        ("1d 2h 3m 4s", 93_784.0),
        (" 5s ", 5.0),
    ],
)
def test_a_duration_is_seconds_or_numbers_with_units(text: str, expected: float) -> None:
    assert duration(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["", "s", "10M", "10 minutes", "1h x", "-5s", "1e3", "nan", "1w"])
def test_a_bad_duration_says_what_a_duration_is(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"^not a duration: .*90s, 10m"):
        duration(text)


def test_seconds_is_a_duration_within_its_bounds() -> None:
    assert seconds("7d") == 604_800.0
    with pytest.raises(argparse.ArgumentTypeError, match="more than 0"):
        seconds("0s")
    with pytest.raises(argparse.ArgumentTypeError, match="at most"):
        seconds("99999999999d")


# --- with_config, over a parser of its own: any option is covered ---


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    p.add_argument("--config")
    p.add_argument("--data", required=True)
    p.add_argument("--udp", default="127.0.0.1:7400")
    p.add_argument("--no-udp", dest="udp", action="store_const", const=None)
    p.add_argument("--retain-bytes", type=size_at_least(0))
    p.add_argument("--sync", choices=("batch", "always"), default="batch")
    p.add_argument("--insecure", action="store_true")
    p.add_argument("--log-level", default="info")  # one no table lists
    return p


def _parsed(args: list[str], env: dict[str, str]) -> argparse.Namespace:
    p = _parser()
    return p.parse_args(with_config(p._actions, args, env))


def test_env_names_are_the_option_upper_cased_with_underscores() -> None:
    assert env_name("retain-bytes") == "PURELINK_RETAIN_BYTES"
    assert env_name("data") == "PURELINK_DATA"


def test_flags_win_over_the_environment_which_wins_over_the_file(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('data = "/f"\nudp = "h:1"\nretain_bytes = "1K"\nlog-level = "debug"\n')
    env = {"PURELINK_UDP": "h:2", "PURELINK_RETAIN_BYTES": "2K", "PURELINK_SYNC": "always"}
    got = _parsed(["--config", str(config), "--retain-bytes", "3K"], env)
    assert (got.data, got.udp, got.retain_bytes, got.sync) == ("/f", "h:2", 3072, "always")
    assert got.log_level == "debug"
    got = _parsed([], {**env, "PURELINK_CONFIG": str(config)})  # the file from the environment
    assert (got.data, got.udp, got.retain_bytes) == ("/f", "h:2", 2048)


def test_switches_from_the_environment_and_the_file(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('data = "/f"\ninsecure = true\nno-udp = true\n')
    got = _parsed(["--config", str(config)], {})
    assert got.insecure is True and got.udp is None
    got = _parsed(["--config", str(config)], {"PURELINK_INSECURE": "no", "PURELINK_UDP": "h:9"})
    assert got.insecure is False and got.udp == "h:9"  # the environment takes both back
    for word, value in (("1", True), ("Yes", True), ("true", True), ("0", False), ("off", False)):
        assert _parsed(["--data", "d"], {"PURELINK_INSECURE": word}).insecure is value
    assert _parsed(["--data", "d"], {"PURELINK_INSECURE": ""}).insecure is False  # unset
    got = _parsed(["--data", "d", "--udp", "h:3"], {"PURELINK_NO_UDP": "1"})
    assert got.udp == "h:3"  # the flag wins over the environment's switch


def test_toml_integers_and_floats_are_taken_as_their_digits(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('data = "/f"\nretain-bytes = 1_048_576\nlog_level = 3.5\n')
    got = _parsed(["--config", str(config)], {})
    assert (got.retain_bytes, got.log_level) == (1 << 20, "3.5")


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        (
            "retian-bytes = 1",
            {},
            "c.toml: unknown option 'retian-bytes' (did you mean 'retain-bytes'?)",
        ),
        ("config = 'x.toml'", {}, "c.toml: unknown option 'config'"),
        ("help = true", {}, "c.toml: unknown option 'help'"),
        ("[serve]\ndata = 'x'", {}, "c.toml: unknown option 'serve'"),
        ("retain-bytes = 'lots'", {}, "c.toml: retain-bytes: not a size: 'lots'"),
        ("retain-bytes = -1", {}, "c.toml: retain-bytes: not a size: '-1'"),
        ("sync = 'never'", {}, "c.toml: sync: 'never' is not one of batch, always"),
        ("insecure = 'yes'", {}, "c.toml: insecure: give true or false, not 'yes'"),
        ("udp = true", {}, "c.toml: udp: takes a string or a number, not true or false"),
        ("udp = ['a', 'b']", {}, "c.toml: udp: takes a string or a number, not list"),
        ("udp = 'a'\nno_udp = true\nno-udp = false", {}, "'no-udp' is given twice"),
        ("data = [", {}, "c.toml: not valid TOML: "),
        ("", {"PURELINK_RETAIN_BYTES": "1X"}, "PURELINK_RETAIN_BYTES: not a size: '1X'"),
        ("", {"PURELINK_INSECURE": "maybe"}, "PURELINK_INSECURE: not a yes or no: 'maybe'"),
        ("", {"PURELINK_SYNC": "fast"}, "PURELINK_SYNC: 'fast' is not one of batch, always"),
    ],
)
def test_a_bad_file_or_value_names_where_it_came_from(
    tmp_path: Path, text: str, env: dict[str, str], message: str
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(text)
    with pytest.raises(UsageError) as caught:
        with_config(_parser()._actions, ["--config", str(config)], env)
    assert message in str(caught.value).replace(str(tmp_path) + "/", "")


def test_a_missing_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"cannot read --config '.*nope.toml': No such file"):
        with_config(_parser()._actions, [f"--config={tmp_path / 'nope.toml'}"], {})


def test_help_is_not_held_up_by_a_bad_environment() -> None:
    args = ["--help"]
    assert with_config(_parser()._actions, args, {"PURELINK_RETAIN_BYTES": "1X"}) == args


def test_unknown_purelink_variables_are_left_alone() -> None:
    assert _parsed(["--data", "d"], {"PURELINK_FIGURES": "x", "PURELINK_NOPE": "1"}).data == "d"
