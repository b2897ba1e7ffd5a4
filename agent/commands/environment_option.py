"""`--environment trained|rich`: which texts the model reads, for every command that runs tools."""

from __future__ import annotations

import argparse

from ..tools.environment import DEFAULT_ENVIRONMENT, ENVIRONMENT_NAMES, Environment


def add_environment_argument(parser: argparse.ArgumentParser) -> None:
    """Add --environment (default: the trained environment's texts)."""
    parser.add_argument(
        "--environment", choices=ENVIRONMENT_NAMES, default=DEFAULT_ENVIRONMENT.value,
        help="the texts the model reads: tool outputs and turn texts as in training "
             f"({DEFAULT_ENVIRONMENT}, default) or our richer formats (rich), to compare them")


def environment_from_args(args: argparse.Namespace) -> Environment:
    """The environment the options name."""
    return Environment(args.environment)
