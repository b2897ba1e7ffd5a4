"""argparse's private attributes that agent/commands/argparse_shim.py reads are still there (only it reads
them: tests/project/test_code_rules.py)."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

import pytest

from agent.commands.argparse_shim import SuggestingParser, option_groups, subcommands

PYTHON = f"Python {sys.version_info.major}.{sys.version_info.minor}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tool")
    parser.add_argument("--loud", action="store_true", help="say more")
    parser.add_argument("--quiet", help=argparse.SUPPRESS)
    group = parser.add_argument_group("output")
    group.add_argument("--out", metavar="PATH", help="where")
    commands = parser.add_subparsers(dest="command", title="commands")
    run = commands.add_parser("run", help="run it")
    run.add_argument("target", help="what to run")
    actions = run.add_subparsers(dest="action", title="actions").add_parser("now")
    actions.add_argument("--fast", action="store_true", help="quickly")
    return parser


def test_the_private_attributes_the_shim_reads_exist() -> None:
    """`_action_groups` (titled, with `_group_actions`), `_actions`, `_SubParsersAction` (with its
    `choices`) and `_HelpAction`: each is named when this Python's argparse lacks it."""
    parser = _parser()
    groups = getattr(parser, "_action_groups", None)
    assert isinstance(groups, list), f"{PYTHON}: no ArgumentParser._action_groups"
    assert all(
        hasattr(g, "title") and isinstance(getattr(g, "_group_actions", None), list)
        for g in parser._action_groups
    ), f"{PYTHON}: an argument group lost title or _group_actions"
    assert isinstance(getattr(parser, "_actions", None), list), f"{PYTHON}: no ArgumentParser._actions"
    for name in ("_SubParsersAction", "_HelpAction"):
        assert isinstance(getattr(argparse, name, None), type), f"{PYTHON}: argparse.{name} is gone"
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert isinstance(sub.choices, dict), f"{PYTHON}: _SubParsersAction.choices is no longer a dict"


def test_groups_and_subcommands_are_listed_as_help_shows_them() -> None:
    """The groups with their shown options (no --help, no hidden option, no subcommand list), and
    every subcommand depth first."""
    parser = _parser()
    assert [(title, [a.dest for a in actions]) for title, actions in option_groups(parser)] == [
        ("options", ["loud"]),
        ("output", ["out"]),
    ]
    listed = subcommands(parser)
    assert [p.prog for p in listed] == ["tool run", "tool run target now"]
    assert [(title, [a.dest for a in actions]) for title, actions in option_groups(listed[0])] == [
        ("positional arguments", ["target"])
    ]


def test_a_subcommand_is_parsed_by_a_parser_of_its_parents_class() -> None:
    """SuggestingParser relies on argparse making each subcommand's parser of its parent's class and
    calling its `parse_known_args`: an unknown option of a subcommand is then named by that subcommand."""
    parser = SuggestingParser(prog="tool")
    run = parser.add_subparsers(dest="command").add_parser("run")
    run.add_argument("--fast", action="store_true")
    assert type(run) is SuggestingParser, f"{PYTHON}: subcommand parsers are no longer of the parent's class"

    def refuse(message: str) -> NoReturn:
        raise ValueError(message)

    run.fail = refuse  # type: ignore[method-assign]
    with pytest.raises(ValueError) as refused:
        parser.parse_args(["run", "--fsat"])
    assert str(refused.value) == "unknown option --fsat; did you mean --fast?", PYTHON
