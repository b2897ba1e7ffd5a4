"""`--environment trained|rich`: which texts the model reads, for every command that runs tools."""

from __future__ import annotations

import argparse

from ..agent_settings import AgentSettings
from ..options import add_flags
from ..tools.environment import Environment


def add_environment_argument(parser: argparse.ArgumentParser) -> None:
    """Add --environment (default: the trained environment's texts), as the server has it."""
    add_flags(parser, AgentSettings, "environment", field_defaults=True)


def environment_from_args(args: argparse.Namespace) -> Environment:
    """The environment the options name."""
    return Environment(args.environment)
