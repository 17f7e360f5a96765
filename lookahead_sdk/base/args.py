"""Command-line value types shared by every parser (the `lookahead-sdk` commands, the benches, the
examples): a bad value fails at parse time with one line naming the flag and what it takes, exit
code 2, before anything runs or is written.

Conventions: `--out` is always a directory; a flag that names one file says its kind (`--json`,
`--plot`, `--report-json`, `--save-profile`, ...); durations carry their unit (`--duration-s`,
`--tbt-bound-ms`); a context size in tokens is `--context-length` for a server and
`--window-tokens` for an agent. A renamed flag keeps its old spelling as a hidden alias that
prints a one-line deprecation note (`add_renamed`).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, NoReturn, Protocol, TypeVar
from urllib.parse import urlsplit

T = TypeVar("T")
N = TypeVar("N", int, float)


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line, `prog: error: argument --flag: what it
    takes (see prog --help)`, instead of the whole usage block; its sub-parsers inherit it."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        # The innermost sub-command parsed first: its prog names the command in run-time errors.
        if getattr(parsed, "command_prog", None) is None:
            parsed.command_prog = self.prog
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        # A required renamed flag is a required group of one visible flag (add_renamed).
        message = re.sub(
            r"^one of the arguments (\S+) is required$",
            r"the following arguments are required: \1",
            message,
        )
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


@dataclass(frozen=True)
class Number(Generic[N]):
    """A number in a range, e.g. `Number(int, low=1)` for a count; NaN and infinities never pass."""

    kind: Callable[[str], N]
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # low itself excluded: > rather than >=
    high_open: bool = False

    def __call__(self, text: str) -> N:
        try:
            value = self.kind(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {self.describe()}, got {text!r}") from None
        if not math.isfinite(value) or not self._in_range(value):
            raise argparse.ArgumentTypeError(f"expected {self.describe()}, got {text!r}")
        return value

    def _in_range(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def describe(self) -> str:
        noun = "an integer" if self.kind is int else "a number"
        low = None if self.low is None else f"{'>' if self.low_open else '>='} {self.low:g}"
        high = None if self.high is None else f"{'<' if self.high_open else '<='} {self.high:g}"
        return " ".join([noun, " and ".join(bound for bound in (low, high) if bound)]).strip()


positive_int = Number(int, low=1)
non_negative_int = Number(int, low=0)
positive_float = Number(float, low=0, low_open=True)
non_negative_float = Number(float, low=0)
fraction = Number(float, low=0, high=1, high_open=True)  # 0 <= x < 1, e.g. a held-out share
port = Number(int, low=1, high=65_535)
port_or_zero = Number(int, low=0, high=65_535)  # 0: let the system pick a free port


def positive_int_range(text: str) -> tuple[int, int]:
    """`LOW,HIGH` with 0 < LOW <= HIGH."""
    try:
        low, high = (int(part) for part in text.split(","))
    except ValueError:
        low = high = 0
    if not 0 < low <= high:
        raise argparse.ArgumentTypeError(
            f"expected LOW,HIGH integers with 0 < LOW <= HIGH such as 600,650, got {text!r}"
        )
    return low, high


def one_of(choices: Collection[str]) -> Callable[[str], str]:
    """One of `choices` (like argparse's `choices=`, for items of a comma-separated list)."""

    def parse(text: str) -> str:
        value = text.strip()
        if value not in choices:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    return parse


def comma_list(item: Callable[[str], T]) -> Callable[[str], tuple[T, ...]]:
    """A non-empty comma-separated list, each item parsed (and checked) by `item`."""

    def parse(text: str) -> tuple[T, ...]:
        parts = [part for part in text.split(",") if part.strip()]
        if not parts:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
        try:
            return tuple(item(part) for part in parts)
        except argparse.ArgumentTypeError as error:
            where = f" (in {text!r})" if len(parts) > 1 else ""
            raise argparse.ArgumentTypeError(f"{error}{where}") from None

    return parse


def existing_file(text: str) -> Path:
    path = Path(text).expanduser()
    if not path.is_file():
        problem = "is a directory" if path.is_dir() else "does not exist"
        raise argparse.ArgumentTypeError(f"expected an existing file, {text!r} {problem}")
    return path


def existing_dir(text: str) -> Path:
    path = Path(text).expanduser()
    if not path.is_dir():
        problem = "is a file" if path.exists() else "does not exist"
        raise argparse.ArgumentTypeError(f"expected an existing directory, {text!r} {problem}")
    return path


def output_file(text: str) -> Path:
    """A file to write (its directory is created when written)."""
    path = Path(text).expanduser()
    if not text.strip() or path.is_dir():
        raise argparse.ArgumentTypeError(f"expected a file to write, {text!r} is a directory")
    return path


def output_dir(text: str) -> Path:
    """A directory to write into (created when written)."""
    path = Path(text).expanduser()
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a directory to write into, got ''")
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"expected a directory to write into, {text!r} is a file")
    return path


def name_or_file(names: Collection[str], what: str) -> Callable[[str], str]:
    """A built-in name or the path of an existing file, e.g. a latency profile."""

    def parse(text: str) -> str:
        if text in names or Path(text).expanduser().is_file():
            return text
        raise argparse.ArgumentTypeError(
            f"expected a built-in {what} ({', '.join(sorted(names))}) or a {what} file, "
            f"{text!r} is neither"
        )

    return parse


def http_url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL, got {text!r}")
    return text


class _DeprecatedAlias(argparse.Action):
    """An old spelling of `target`: notes the rename on stderr, then acts as `target` does."""

    def __init__(
        self, option_strings: Sequence[str], dest: str, target: argparse.Action, **_: Any
    ) -> None:
        super().__init__(
            option_strings,
            target.dest,
            nargs=target.nargs,
            type=target.type,
            choices=target.choices,
            metavar=target.metavar,
            default=argparse.SUPPRESS,
            help=argparse.SUPPRESS,
        )
        self.target = target

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        new = self.target.option_strings[0]
        print(f"{parser.prog}: warning: {option_string} is deprecated, use {new}", file=sys.stderr)
        self.target(parser, namespace, values, new)


def add_renamed(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    flag: str,
    *old: str,
    **kwargs: Any,
) -> argparse.Action:
    """`parser.add_argument(flag, **kwargs)`, with each `old` spelling a hidden deprecated alias.
    A required flag and its aliases form a required group, so either spelling satisfies it."""
    container: Any = parser
    if kwargs.pop("required", False):
        container = parser.add_mutually_exclusive_group(required=True)
    action = container.add_argument(flag, **kwargs)
    for name in old:
        container.add_argument(name, action=_DeprecatedAlias, target=action)
    return action


class BeBatchingDefaults(Protocol):
    """What `add_be_batching` takes its defaults from (a `scheduling.HybridConfig`)."""

    @property
    def be_step_ms(self) -> float | None: ...

    @property
    def be_beside_lc_prefill(self) -> bool: ...


def add_be_batching(parser: argparse.ArgumentParser, defaults: BeBatchingDefaults) -> None:
    """How a hybrid-batching server batches best-effort (lookahead) work: `--be-step-ms` and
    `--be-beside-lc-prefill`, defaulting to `defaults`; read back with `be_batching(args)`
    (keyword arguments of `HybridConfig` and `PluginSettings`)."""
    parser.add_argument(
        "--be-step-ms",
        type=non_negative_float,
        default=defaults.be_step_ms or 0.0,
        help=(
            "most that best-effort (lookahead) chunks may add to one hybrid batch, in ms: a "
            "request arriving while the batch runs waits at most this long for them (0: fill "
            "up to the TBT bound)"
        ),
    )
    parser.add_argument(
        "--be-beside-lc-prefill",
        action=argparse.BooleanOptionalAction,
        default=defaults.be_beside_lc_prefill,
        help=(
            "let best-effort chunks share a batch with latency-critical prefill (the paper's "
            "fill; off: a foreground request's first token never waits for them)"
        ),
    )


def be_batching(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "be_step_ms": args.be_step_ms or None,
        "be_beside_lc_prefill": args.be_beside_lc_prefill,
    }
