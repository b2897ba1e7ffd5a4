"""The installed version, and the `--version` flag of both commands, which reads it only when asked.

Reading a distribution's metadata imports `importlib.metadata` (email parsing, zip files): a tenth
of a second on a loaded machine, more than the rest of `sqale-agent --version`. So no module
imports it at start, and a command line without --version never reads it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, NoReturn

DISTRIBUTION = "sqale-mcp"
VERSION_FLAG = "--version"
VERSION_HELP = "show program's version number and exit"


def package_version() -> str:
    """The installed sqale-mcp version, or 0+unknown when running from a plain checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"


class ShowVersion(argparse.Action):
    """`--version`: print "PROG VERSION" on stdout and exit 0, as argparse's version action does,
    reading the version only then."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str = argparse.SUPPRESS,
        default: Any = argparse.SUPPRESS,
        help: str | None = VERSION_HELP,  # noqa: A002 - argparse's name
    ) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> NoReturn:
        print(f"{parser.prog} {package_version()}")
        parser.exit()


def add_version_flag(parser: argparse.ArgumentParser, help: str = VERSION_HELP) -> None:  # noqa: A002
    """Add `--version` to `parser`."""
    parser.add_argument(VERSION_FLAG, action=ShowVersion, help=help)


def print_version_if_alone(prog: str, argv: Sequence[str]) -> None:
    """Answer `PROG --version` (that argument alone) without building the command's parser:
    print what its --version prints and exit 0; any other command line returns."""
    if list(argv) == [VERSION_FLAG]:
        alone = argparse.ArgumentParser(prog=prog, add_help=False)
        add_version_flag(alone)
        alone.parse_args([VERSION_FLAG])
