"""What argparse has no public API for: a parser's argument groups, their options, and its subcommands;
and the parser both commands use, which names the nearest option for a mistyped one.

docs/options.md lists each `sqale-agent` command's options (most of them are not settings: a
question, a dataset, --json) as `--help` does, group by group; argparse keeps those only in
private attributes. This is the one module that reads them (`_action_groups`, `_group_actions`,
`_actions`, `_SubParsersAction`, `_HelpAction`); tests/commands/test_argparse_shim.py checks that each is
still there. The settings' own flags are listed from their declarations (agent/options.py).

`SuggestingParser` (every parser of `sqale-agent` and `sqale-mcp`, subcommands included: argparse
makes them of their parent's class) refuses an unknown option at once, naming the nearest one
(`--samles` -> `--samples`), before anything is run: argparse alone reads `ask --samles 3 "q"` as
the question `3` and two stray arguments. An invalid choice (`sqale-agent aks`, `--backend olama`)
gets the nearest choice too. Python 3.14's `suggest_on_error` does part of this; we support 3.11.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from ..text import did_you_mean

# The object `add_subparsers()` returns, to name in type hints (argparse exports no public name).
SubParsers = argparse._SubParsersAction


def option_groups(parser: argparse.ArgumentParser) -> list[tuple[str, list[argparse.Action]]]:
    """Each argument group's title and the arguments `--help` lists under it (not --help itself,
    nor the list of subcommands); groups without any are left out."""
    groups = []
    for group in parser._action_groups:
        actions = [
            a
            for a in group._group_actions
            if a.help != argparse.SUPPRESS
            and not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)
        ]
        if actions:
            groups.append((group.title or "", actions))
    return groups


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string `parser` takes (`--samples`, `-h`), for suggestions."""
    return [s for action in parser._actions for s in action.option_strings]


_NEGATIVE_NUMBER = re.compile(r"-\d+$|-\d*\.\d+$")
# argparse's wording of an invalid choice, quoted (3.11) or not (3.12.8+, 3.13)
_INVALID_CHOICE = re.compile(r"invalid choice: '?(?P<given>[^']*?)'? \(choose from (?P<choices>.*)\)$")


class SuggestingParser(argparse.ArgumentParser):
    """argparse that refuses an unknown option, or an argument it has no place for, naming the nearest
    option or choice, in the parser (subcommand) it was given to.

    An unknown option is named before any other error it may have caused (`--dbb x` leaves `--db`
    missing: the typo is the error to show).
    """

    _given: tuple[str, ...] = ()  # the arguments of the parse under way

    def parse_known_args(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        namespace: argparse.Namespace | None = None,
    ) -> tuple[argparse.Namespace, list[str]]:
        """argparse's parse; an argument left over is an error here, named by this parser."""
        given = list(sys.argv[1:] if args is None else args)
        self._given = tuple(given)
        parsed, extras = super().parse_known_args(given, namespace)
        if extras:
            self.error(self._unexpected(extras))
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        """argparse's error, unless an unknown option was given (then that one, with the nearest option);
        an invalid choice gets the nearest choice."""
        unknown = self._unknown_option()
        if unknown is not None:
            message = f"unknown option {unknown}{did_you_mean(unknown, option_strings(self))}"
        elif (invalid := _INVALID_CHOICE.search(message)) is not None:
            choices = [c.strip().strip("'") for c in invalid["choices"].split(",")]
            message += did_you_mean(invalid["given"], choices)
        self.fail(message)

    def fail(self, message: str) -> NoReturn:
        """Report a usage error: argparse's usage and message, exit status 2 (a subclass may raise)."""
        super().error(message)

    def _unknown_option(self) -> str | None:
        """The first argument of the parse that looks like an option this parser does not take (as
        typed, without `=VALUE`): not an option string, nor the unique start of one, nor after `--`."""
        given = self._given[: self._given.index("--")] if "--" in self._given else self._given
        known = option_strings(self)
        commands = any(isinstance(action, argparse._SubParsersAction) for action in self._actions)
        for arg in given:
            if not arg.startswith("-") or arg == "-" or " " in arg or _NEGATIVE_NUMBER.match(arg):
                if commands:  # the subcommand: what follows is its own
                    return None
                continue
            typed = arg.partition("=")[0]
            if typed in known or (typed.startswith("--") and any(o.startswith(typed) for o in known)):
                continue
            if not typed.startswith("--") and typed[:2] in known:  # `-o5`, `-hv`: a short option's own
                continue
            return typed
        return None

    def _unexpected(self, extras: list[str]) -> str:
        """The error for arguments left over (no unknown option among them)."""
        unexpected = f"unexpected argument{'s' if len(extras) > 1 else ''}: {' '.join(extras)}"
        if not any(not action.option_strings for action in self._actions):
            return f"{unexpected} ({self.prog} takes options only)"
        return f"{unexpected} (put a question, or a value with spaces, in quotes)"


def subcommands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every subcommand's parser, depth first (`sqale-agent golden`, then `sqale-agent golden add`)."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += [sub, *subcommands(sub)]
    return found
