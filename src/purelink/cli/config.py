"""`purelink serve`'s options from the environment and from `--config FILE` (SPEC §4).

Why it exists: a service is configured the way its host does it -- a unit's
`Environment=`, a container's variables, a file under /etc -- not only by its
command line.  Every option of serve's parser can come from each of the three:

* the environment: `PURELINK_` + the option's name in capitals, `-` as `_`
  (`PURELINK_RETAIN_BYTES=1G`; `PURELINK_CONFIG` names the file); an empty
  variable counts as unset, a flag such as `--insecure` takes 1/0, true/false,
  yes/no or on/off;
* the TOML file (`--config FILE`, read with `tomllib`): top-level keys named as
  the options are, `retain-bytes` or `retain_bytes`; a value is a string, an
  integer or a float, a flag's is true or false;
* the command line.

A flag wins over the environment, the environment over the file, the file over
the defaults.  How: the file's and the environment's values, merged, become
`--name=value` arguments put before the command line's, so that argparse
itself applies them -- a later option wins, a required `--data` is satisfied,
and every option (those added to serve later too) is covered by walking the
parser's actions, with no table to keep.  Each value is first checked here
with the option's own type, so a bad one is an error naming where it came from:
`PURELINK_RETAIN_BYTES: not a size: 'lots'`, `serve.toml: unknown option 'retian-bytes'`.
"""

from __future__ import annotations

import argparse
import difflib
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from .common import UsageError

__all__ = ["ENV_PREFIX", "env_name", "with_config"]

ENV_PREFIX = "PURELINK_"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_NOT_SETTABLE = ("help", "config")  # --config names the file: in it, it would be a loop


@dataclass(frozen=True)
class _Option:
    """One option of the parser, as the environment and the file name it."""

    name: str
    """Its long flag without the dashes: "retain-bytes"."""
    action: argparse.Action
    """What argparse does with it: its type, choices, and whether it takes a value."""

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    @property
    def is_switch(self) -> bool:
        """True for an option that takes no value (store_true, store_const)."""
        return self.action.nargs == 0


def env_name(option: str) -> str:
    """The environment variable of an option: "retain-bytes" -> "PURELINK_RETAIN_BYTES"."""
    return ENV_PREFIX + option.upper().replace("-", "_")


def with_config(
    actions: Iterable[argparse.Action], args: Sequence[str], environ: Mapping[str, str]
) -> list[str]:
    """`args` (a verb's arguments, after its name) with the values of the
    --config file and of the environment put before them, as `--name=value`
    (see the module); `actions` are the verb's parser's.  UsageError for a bad
    file, key or value, naming it."""
    if "-h" in args or "--help" in args:
        return list(args)
    options = _options(actions)
    chosen: dict[str, tuple[_Option, str | None]] = {}
    path = _config_path(args, environ)
    if path is not None:
        _choose(chosen, _from_file(path, options))
    _choose(chosen, _from_environment(environ, options))
    before = [
        opt.flag if value is None else f"{opt.flag}={value}" for opt, value in chosen.values()
    ]
    return [*before, *args]


def _options(actions: Iterable[argparse.Action]) -> dict[str, _Option]:
    """The options that take one value or none, by name (their long flag)."""
    found: dict[str, _Option] = {}
    for action in actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if not longs or action.nargs not in (None, 0):
            continue
        name = longs[0].removeprefix("--")
        if name not in _NOT_SETTABLE:
            found[name] = _Option(name, action)
    return found


def _config_path(args: Sequence[str], environ: Mapping[str, str]) -> str | None:
    """The file --config names on the command line, else PURELINK_CONFIG's."""
    finder = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    finder.add_argument("--config")
    known, _ = finder.parse_known_args(args)
    path = known.config if known.config is not None else environ.get(env_name("config"))
    if path == "":
        return None
    return str(path) if path is not None else None


def _choose(
    chosen: dict[str, tuple[_Option, str | None]], values: Iterator[tuple[_Option, str | bool]]
) -> None:
    """Merge one source's values into `chosen` (by destination: --udp and
    --no-udp set the same one, the later source wins).  A switch that is false
    adds nothing, and takes back that same switch from an earlier source."""
    for option, value in values:
        dest = option.action.dest
        if value is False:
            if dest in chosen and chosen[dest][0] is option:
                del chosen[dest]
        else:
            chosen[dest] = (option, None if value is True else value)


def _from_environment(
    environ: Mapping[str, str], options: Mapping[str, _Option]
) -> Iterator[tuple[_Option, str | bool]]:
    """Each option whose PURELINK_ variable is set (and not empty), checked."""
    for option in options.values():
        variable = env_name(option.name)
        text = environ.get(variable, "")
        if text == "":
            continue
        if option.is_switch:
            yield option, _switch(variable, text)
        else:
            yield option, _checked(variable, option, text)


def _switch(source: str, text: str) -> bool:
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise UsageError(f"{source}: not a yes or no: {text!r} (give 1 or 0, true or false, yes or no)")


def _from_file(path: str, options: Mapping[str, _Option]) -> Iterator[tuple[_Option, str | bool]]:
    """Each key of the TOML file at `path`, as its option and checked value."""
    try:
        with open(path, "rb") as file:
            table = tomllib.load(file)
    except OSError as exc:
        raise UsageError(f"cannot read --config {path!r}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:  # TOML is UTF-8
        raise UsageError(f"{path}: not valid TOML: {exc}") from None
    seen: dict[str, str] = {}
    for key, value in table.items():
        option = options.get(key.replace("_", "-"))
        if option is None:
            raise UsageError(f"{path}: unknown option {key!r}{_did_you_mean(key, options)}")
        if option.name in seen:
            raise UsageError(
                f"{path}: {option.name!r} is given twice ({seen[option.name]!r}, {key!r})"
            )
        seen[option.name] = key
        yield option, _file_value(f"{path}: {key}", option, value)


def _did_you_mean(key: str, options: Mapping[str, _Option]) -> str:
    close = difflib.get_close_matches(key.replace("_", "-"), list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _file_value(source: str, option: _Option, value: object) -> str | bool:
    """A TOML value as the option takes it: a bool for a switch; a string, an
    integer or a float (as its digits) for an option with a value."""
    if option.is_switch:
        if not isinstance(value, bool):
            raise UsageError(f"{source}: give true or false, not {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        kind = "true or false" if isinstance(value, bool) else type(value).__name__
        raise UsageError(f"{source}: takes a string or a number, not {kind}")
    return _checked(source, option, str(value))


def _checked(source: str, option: _Option, text: str) -> str:
    """`text` if the option's type and choices take it; else a UsageError
    naming `source` (argparse would name the flag, not where the value came from)."""
    action = option.action
    value: object = text
    if callable(action.type):
        try:
            value = action.type(text)
        except (argparse.ArgumentTypeError, ValueError, TypeError, OverflowError) as exc:
            raise UsageError(f"{source}: {exc}") from None
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(map(str, action.choices))
        raise UsageError(f"{source}: {text!r} is not one of {choices}")
    return text
