"""What argparse has no public API for: a parser's argument groups, their options, and its subcommands.

docs/options.md lists each `sqale-agent` command's options (most of them are not settings: a
question, a dataset, --json) as `--help` does, group by group; argparse keeps those only in
private attributes. This is the one module that reads them (`_action_groups`, `_group_actions`,
`_actions`, `_SubParsersAction`, `_HelpAction`); tests/commands/test_argparse_shim.py checks that each is
still there. The settings' own flags are listed from their declarations (agent/options.py).
"""

from __future__ import annotations

import argparse

# The object `add_subparsers()` returns, to name in type hints (argparse exports no public name).
SubParsers = argparse._SubParsersAction



def option_groups(parser: argparse.ArgumentParser) -> list[tuple[str, list[argparse.Action]]]:
    """Each argument group's title and the arguments `--help` lists under it (not --help itself,
    nor the list of subcommands); groups without any are left out."""
    groups = []
    for group in parser._action_groups:
        actions = [a for a in group._group_actions if a.help != argparse.SUPPRESS
                   and not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)]
        if actions:
            groups.append((group.title or "", actions))
    return groups


def subcommands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every subcommand's parser, depth first (`sqale-agent golden`, then `sqale-agent golden add`)."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += [sub, *subcommands(sub)]
    return found
