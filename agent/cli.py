"""The `sqale-agent` command line: one subcommand per module of agent/commands."""

from __future__ import annotations

import argparse
import sys

from .commands import ask, doctor, evaluate, golden, tool
from .errors import SqaleError

# Modules with register(subparsers); each sets `run(args) -> int` on its parser.
COMMANDS = (ask, doctor, evaluate, golden, tool)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="sqale-agent",
        description="Ask SQLite databases questions through a small local text-to-SQL agent.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; our errors become one line on stderr and exit status 1."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except SqaleError as exc:
        print(f"sqale-agent {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
