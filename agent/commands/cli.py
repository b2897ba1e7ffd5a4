"""The `sqale-agent` command line: one subcommand per module beside this one."""

from __future__ import annotations

import argparse
import json
import re
import sys

from .. import package_version
from ..errors import SqaleError
from . import ask, doctor, evaluate, golden, html_report, run_tool

# Each module has NAME, HELP, DESCRIPTION, add_arguments(parser) and run(args) -> exit status.
COMMANDS = (ask, doctor, evaluate, golden, html_report, run_tool)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="sqale-agent",
        description="Ask SQLite databases questions through a small local text-to-SQL agent.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for command in COMMANDS:
        command_parser = subparsers.add_parser(command.NAME, help=command.HELP,
                                               description=command.DESCRIPTION)
        command.add_arguments(command_parser)
        command_parser.set_defaults(run=command.run, print_help=command_parser.print_help)
    return parser


EXIT_USAGE = 2  # as argparse exits on a usage error
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped with Ctrl-C


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; our errors become one line on stderr and exit status 1, Ctrl-C 130.

    No subcommand: the help, which lists them, on stderr and exit 2.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.run(args))
    except SqaleError as exc:
        if getattr(args, "json", False):  # scripts read stdout: they get an object there too
            print(json.dumps({"error": str(exc), "kind": error_kind(exc)}, ensure_ascii=False))
        print(f"sqale-agent {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\nsqale-agent {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def error_kind(exc: Exception) -> str:
    """The error's class as snake_case, e.g. BackendUnreachable -> backend_unreachable."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(exc).__name__).lower()


if __name__ == "__main__":
    raise SystemExit(main())
