"""The tools' arguments: how a parameter is declared, parsing the model's JSON, clamping limits.

Pure functions. A problem with the arguments comes back as an ArgProblem whose text
tells the model the right call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..text import ECHO_CHARS, format_count, lone_surrogate_at

SHOWN_NUMBER_LIMIT = 10**15  # a limit larger than this is not repeated back in full


@dataclass(frozen=True)
class ArgProblem:
    """Why a call's arguments cannot be used, as the text the model gets."""

    text: str


@dataclass(frozen=True)
class Param:
    """One argument of a tool."""

    name: str
    kind: str  # "text" (a non-empty string) or "count" (a whole number)
    required: bool = True
    aliases: tuple[str, ...] = ()  # other spellings small models use for it
    # False for an argument the tools accept but the trained system prompt does not list
    in_system_prompt: bool = True

    @property
    def keys(self) -> tuple[str, ...]:
        """The name and its aliases, in the order a call's keys are looked up."""
        return (self.name, *self.aliases)

    @property
    def expected(self) -> str:
        return "a whole number" if self.kind == "count" else "a string"


def echo(value: Any) -> str:
    """A value the model sent, as repr, cut so a huge value cannot flood the context."""
    if isinstance(value, int) and abs(value) >= SHOWN_NUMBER_LIMIT:
        # str() of an int past 4,300 digits raises; the size is what the model needs to know.
        return f"a number of about {int(value.bit_length() * 0.30103) + 1:,} digits"
    # repr of a cut prefix only (never of megabytes); the first ECHO_CHARS are the same.
    text = repr(value[: ECHO_CHARS + 1] if isinstance(value, str) else value)
    return text if len(text) <= ECHO_CHARS else text[:ECHO_CHARS] + "…"


def usage(tool: str, example: str) -> str:
    """`call it as {"tool": ..., "args": {...}}` for one tool, given its example arguments."""
    return f'call it as {{"tool": "{tool}", "args": {example}}}'


def parse_count(value: Any) -> int | None:
    """A whole number from an int, an integral float or a numeric string; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:  # not a number, or too many digits for Python to convert
            return None
    return None


def parse_params(tool: str, params: Sequence[Param], example: str, args: Any) -> dict[str, Any] | ArgProblem:
    """Every one of `params` under its canonical name (None when optional and absent).

    A problem names the argument and shows the right call, built from `example`.
    """

    def _problem(text: str) -> ArgProblem:
        return ArgProblem(f"{tool} {text}; {usage(tool, example)}")

    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        return _problem("needs its arguments as a JSON object")
    parsed: dict[str, Any] = {}
    for param in params:
        key = next((k for k in param.keys if k in args), param.name)
        value = args.get(key)
        if value is None or (isinstance(value, str) and not value.strip()):
            if param.required:
                return _problem(f'needs "{param.name}" ({param.expected})')
            parsed[param.name] = None
            continue
        if param.kind == "count":
            count = parse_count(value)
            if count is None:
                return _problem(f'needs "{param.name}" as {param.expected}, got {echo(value)}')
            value = count
        elif not isinstance(value, str):
            return _problem(f'needs "{param.name}" ({param.expected}), got {echo(value)}')
        elif (at := lone_surrogate_at(value)) is not None:
            # A lone surrogate (e.g. from a JSON "\ud800" escape) is not text SQLite can take.
            return _problem(
                f'got "{param.name}" with an invalid character ({echo(value[at])} at position {at}); remove it'
            )
        parsed[param.name] = value
    return parsed


def clamp_limit(limit: int | None, default: int, maximum: int) -> tuple[int, str | None]:
    """The row limit to use, and a note when the one asked for was out of range."""
    if limit is None:
        return default, None
    shown = format_count(limit) if abs(limit) < SHOWN_NUMBER_LIMIT else echo(limit)
    if limit > maximum:
        return maximum, f"[limit {shown} is above the maximum {maximum}; showing up to {maximum}]"
    if limit < 1:
        return 1, f"[limit {shown} is below 1; showing up to 1]"
    return limit, None


def unquote_name(name: str) -> str:
    """A table or column name as the model may copy it (`"Order Details"`, `[x]`, `main.x`), bare."""
    name = name.strip()
    if name.casefold().startswith("main."):
        name = name[5:]
    closers = {'"': '"', "[": "]", "`": "`", "'": "'"}
    if len(name) >= 2 and name[0] in closers and name[-1] == closers[name[0]]:
        inner = name[1:-1]
        return inner if name[0] == "[" else inner.replace(name[0] * 2, name[0])
    return name
