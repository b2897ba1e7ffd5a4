"""Command-line options that choose the model backend and prompts, shared by the commands that run episodes."""

from __future__ import annotations

import argparse
import os

from ..backends.settings import BackendSettings, add_backend_flags, backend_settings
from ..prompt import PromptSet, load_prompts


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the backend flags (agent.backends.settings) and the prompt options --reference-agent,
    --system-prompt, --user-template."""
    group = parser.add_argument_group("model backend")
    add_backend_flags(group)
    group.add_argument("--reference-agent", metavar="PATH",
                       help="the authors' sqale_agent.py: use its SYSTEM_PROMPT and USER_TEMPLATE "
                            "(read, never executed)")
    group.add_argument("--system-prompt", metavar="FILE",
                       help="replace the system prompt with this UTF-8 text file")
    group.add_argument("--user-template", metavar="FILE",
                       help="replace the user turn template ({question}, {evidence}) with this file")


def backend_choice(args: argparse.Namespace) -> BackendSettings:
    """Check the backend options together and read the API key from the environment."""
    return backend_settings(vars(args), os.environ)


def prompts_from_args(args: argparse.Namespace) -> PromptSet:
    """The prompts the options ask for: ours, or the reference agent's, with file overrides."""
    return load_prompts(args.reference_agent, args.system_prompt, args.user_template)
