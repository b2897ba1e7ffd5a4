"""`--verified [ALIAS=]FILE` and `--verified-hints`, for `ask` (and `eval`'s hints)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..agent_settings import AgentSettings
from ..errors import ConfigError
from ..golden_file import database_reference
from ..options import add_flags
from ..verified import VerifiedLibrary


def add_verified_arguments(parser: Any) -> None:
    """Add `--verified` and `--verified-hints` (declared once, in AgentSettings)."""
    parser.add_argument(
        "--verified",
        metavar="[ALIAS=]FILE.jsonl",
        help="a verified library (golden questions): the same question is answered "
        "from it at once, similar ones are listed; entries for ALIAS (default: "
        "the database file's name without its suffix, or its path as the "
        "library names it)",
    )
    add_flags(parser, AgentSettings, "verified_hints", field_defaults=True)


def library_arg(value: str) -> tuple[str | None, Path]:
    """(alias or None, path) of `--verified [ALIAS=]FILE`; a file whose name holds `=` stays a file."""
    alias, sep, path = value.partition("=")
    if sep and alias.strip() and path.strip() and not Path(value).expanduser().exists():
        return alias.strip(), Path(path.strip()).expanduser()
    return None, Path(value).expanduser()


def open_library(args: argparse.Namespace, db_path: Path) -> VerifiedLibrary | None:
    """The --verified library for the database at `db_path` (refusals said on stderr); None without one."""
    if not args.verified:
        if args.verified_hints:
            raise ConfigError("--verified-hints needs a library: add --verified FILE.jsonl")
        return None
    alias, path = library_arg(args.verified)
    if path.exists() and not path.is_file():
        raise ConfigError(f"--verified {args.verified}: not a file; give a JSON Lines file")
    if not path.exists():
        raise ConfigError(
            f"--verified {args.verified}: no such file; create it with `sqale-agent golden "
            f"add --file {path} ...`"
        )
    names = {database_reference(db_path, path), db_path.name}
    return VerifiedLibrary(
        path,
        alias or db_path.stem,
        names=names,
        report=lambda line: print(f"sqale-agent: {line}", file=sys.stderr),
    )
