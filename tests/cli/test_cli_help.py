"""The command line teaches itself: `purelink` alone, every verb's --help, one error shape.

Why it exists: a person meets purelink at its command line.  `purelink`
alone lists the verbs with examples; every option of every verb says what it
does; each verb's --help ends with examples to copy; `bench --help` lists the
benchmarks; and every failure is one line shaped `purelink VERB: error: ...`
whichever verb and whatever went wrong.  The real command runs each time.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from helpers.cli import VERBS, assert_one_line_error, run
from purelink.testing.ports import free_port

OPTION = re.compile(r"^  (-\S.*?)(?:\s{2,}(\S.*))?$")


def test_purelink_alone_lists_the_verbs_with_examples() -> None:
    result = run()
    assert result.returncode == 2
    assert result.stdout == b""
    text = result.stderr.decode()
    for verb in VERBS:
        assert re.search(rf"^\s+{verb}\s+\S", text, re.MULTILINE), verb
    assert "examples:" in text and "purelink serve --data" in text
    assert "'purelink COMMAND --help'" in text


def option_helps(text: str) -> dict[str, str]:
    """{option: its help text} from the options section of a --help page."""
    section = text.split("\noptions:\n", 1)[1].split("\n\n", 1)[0]
    helps: dict[str, str] = {}
    last = ""
    for line in section.splitlines():
        m = OPTION.match(line)
        if m:
            last = m.group(1)
            helps[last] = m.group(2) or ""
        elif last and line.startswith("    "):  # the help text goes on (or starts) below
            helps[last] = f"{helps[last]} {line.strip()}".strip()
    return helps


@pytest.mark.parametrize("verb", VERBS)
def test_every_option_says_what_it_does_and_the_help_ends_with_examples(verb: str) -> None:
    result = run(verb, "--help")
    assert result.returncode == 0, result.stderr
    text = result.stdout.decode()
    helps = option_helps(text)
    assert len(helps) >= 2, text  # --help and at least one of the verb's own
    silent = [option for option, said in helps.items() if not said]
    assert not silent, f"options without help text: {silent}"
    examples = text.split("\nexamples:\n", 1)
    assert len(examples) == 2, "no examples section"
    assert re.search(rf"^  .*purelink {verb}\b", examples[1], re.MULTILINE), examples[1]


def test_bench_help_lists_the_benchmarks() -> None:
    text = run("bench", "--help").stdout.decode()
    listed = text.split("\nbenchmarks:\n", 1)[1]
    for name in ("queue", "wakeups", "compare"):
        assert re.search(rf"^  {name}\s+\S", listed, re.MULTILINE), name


@pytest.mark.parametrize("scheme", ["udp", "tcp"])
def test_an_unreachable_listener_reads_the_same_whatever_the_transport(scheme: str) -> None:
    url = f"{scheme}://127.0.0.1:{free_port(both=True)}"
    line = assert_one_line_error(run("send", url, "--stream", "s", stdin=b"x\n"), 1)
    assert line == f"purelink send: error: cannot reach the listener at {url}: connection refused"


def test_a_bad_argument_names_the_verb() -> None:
    line = assert_one_line_error(run("read", "--data", "/nonexistent-dir", "--stream", "s"), 2)
    assert line.startswith("purelink read: error: ")
    line = assert_one_line_error(run("send", "--stream", "s"), 2)
    assert line.startswith("purelink send: error: the following arguments are required")
    line = assert_one_line_error(run("nonsense"), 2)
    assert line.startswith("purelink: error: argument COMMAND: invalid choice")


def test_a_missing_extra_is_exit_1_for_each_extra() -> None:
    """nats-py blocked: a nats:// store says how to install it, exit 1 (as --metrics does)."""
    code = (
        "import sys; sys.modules['nats'] = None\n"
        "from purelink.cli.command import main\n"
        "raise SystemExit(main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "read", "--data", "nats://127.0.0.1:1", "--stream", "s"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("purelink read: error: ") and "purelink[jetstream]" in line
