"""The database options shared by the commands that open one: the file, and what to hide in it."""

from __future__ import annotations

import argparse
from typing import Any

from ..sqlite import HideRules


def add_database_arguments(parser: Any) -> None:
    """Add `--db PATH` (required) and `--hide`, for the commands that work on one database."""
    parser.add_argument("--db", required=True, metavar="PATH", help="the SQLite database file")
    add_hide_argument(parser)


def add_hide_argument(parser: Any) -> None:
    """Add `--hide TABLE[.COLUMN]` (repeatable)."""
    parser.add_argument("--hide", action="append", default=[], metavar="TABLE[.COLUMN]",
                        help="hide a table or column from the model (repeatable; globs such as "
                             "'*.password*' allowed, any case)")


def hide_rules(args: argparse.Namespace) -> HideRules:
    """The --hide rules, empty when there are none (ConfigError for a malformed rule)."""
    return HideRules.parse(args.hide)
