"""`sqale-agent tool --db PATH TOOL '{"arg": ...}'`: print one tool result as the model sees it."""

from __future__ import annotations

import argparse
import json
import sys

from ..settings import check_plain_path
from ..sqlite import Database
from ..tools import TOOL_NAMES, canonical_tool_name, run_tool, unknown_tool_text
from .db_options import add_database_arguments, database_path, hide_rules
from .environment_option import add_environment_argument, environment_from_args

DESCRIPTION = (
    "Run one of the agent's tools on a database and print its result text exactly "
    "as the model gets it. Mistakes in the call's arguments (unknown table, bad SQL...) "
    "are printed as the model would see them, with exit status 0; an unknown tool or ARGS "
    "that are not a JSON object exit 2, a database that does not open 1."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `sqale-agent tool`."""
    add_database_arguments(parser)
    parser.add_argument("tool_name", metavar="TOOL", help=f"one of: {', '.join(TOOL_NAMES)}")
    parser.add_argument(
        "tool_args",
        metavar="ARGS",
        nargs="?",
        default="{}",
        help='the arguments as a JSON object, e.g. \'{"table_name": "Track"}\' (default {})',
    )
    add_environment_argument(parser)


def run(args: argparse.Namespace) -> int:
    """Print the tool's text; 2 for an unknown tool or ARGS that are not a JSON object."""
    try:
        tool_args = json.loads(args.tool_args)
    except (ValueError, RecursionError) as exc:  # bad JSON, a 4,300+ digit number, deep nesting
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        print(
            f"sqale-agent tool: ARGS is not valid JSON ({reason}); give an object such as "
            '\'{"table_name": "Track"}\'',
            file=sys.stderr,
        )
        return 2
    if not isinstance(tool_args, dict):
        print(
            f"sqale-agent tool: ARGS must be a JSON object, not {type(tool_args).__name__}; "
            'give an object such as \'{"table_name": "Track"}\'',
            file=sys.stderr,
        )
        return 2
    if canonical_tool_name(args.tool_name) is None:
        print(f"sqale-agent tool: {unknown_tool_text(args.tool_name)}", file=sys.stderr)
        return 2
    path = database_path(args)
    check_plain_path(path, args.command)
    with Database(path, hide=hide_rules(args)) as db:
        outcome = run_tool(db, args.tool_name, tool_args, environment=environment_from_args(args))
    print(outcome.text)
    return 0
