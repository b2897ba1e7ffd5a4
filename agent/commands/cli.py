"""The `sqale-agent` command line: one subcommand per module beside this one.

A command's module is imported only when that command runs (or its options are listed): each
one pulls in what it runs on (the engine session and the backends for `ask`, the evaluation for
`eval`), and the others need none of it. So `sqale-agent --version`, `--help` and `tool` start
in a fraction of the time importing every command took.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from collections.abc import Collection, Sequence
from typing import NamedTuple

from ..errors import SqaleError
from ..version import add_version_flag, print_version_if_alone


class Command(NamedTuple):
    """One subcommand: its name (also the name of the module beside this one that runs it) and its
    line in `sqale-agent --help`.

    The module has DESCRIPTION, add_arguments(parser) and run(args) -> exit status.
    """

    name: str
    help: str


PROG = "sqale-agent"
COMMANDS: tuple[Command, ...] = (
    Command("ask", "answer a question on an SQLite database"),
    Command("doctor", "check that the model runtime, the model and the databases are ready"),
    Command("eval", "measure execution accuracy on Spider, BIRD or KaggleDBQA"),
    Command(
        "golden", "build golden questions (question + known-good SQL) on your own database, review proposals"
    ),
    Command("report", "an HTML page of an eval run, or of two runs compared"),
    Command("tool", "run one exploration tool and print exactly what the model would see"),
)


def build_parser(only: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser with every subcommand listed; each gets its options (its module is
    imported) unless `only` names others."""
    from .argparse_shim import SuggestingParser  # not for `--version` alone, which never parses

    parser = SuggestingParser(
        prog=PROG, description="Ask SQLite databases questions through a small local text-to-SQL agent."
    )
    add_version_flag(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for command in COMMANDS:
        command_parser = subparsers.add_parser(command.name, help=command.help)
        if only is None or command.name in only:
            module = importlib.import_module(f".{command.name}", __package__)
            command_parser.description = module.DESCRIPTION
            module.add_arguments(command_parser)
            command_parser.set_defaults(run=module.run, print_help=command_parser.print_help)
    return parser


def named_command(argv: Sequence[str]) -> tuple[str, ...]:
    """The command a command line names: its first argument that is not an option.

    The options before a command (--help, --version) take no value, so that argument is the one
    argparse reads as the command; () when there is none.
    """
    return next(((arg,) for arg in argv if not arg.startswith("-")), ())


EXIT_USAGE = 2  # as argparse exits on a usage error
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped with Ctrl-C


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; our errors become one line on stderr and exit status 1, Ctrl-C 130.

    No subcommand: the help, which lists them, on stderr and exit 2.
    """
    argv = sys.argv[1:] if argv is None else argv
    print_version_if_alone(PROG, argv)
    parser = build_parser(only=named_command(argv))
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
