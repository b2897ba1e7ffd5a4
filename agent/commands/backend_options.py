"""Command-line options that choose the model backend and prompts, shared by the commands that run episodes."""

from __future__ import annotations

import argparse
import os

from ..backends.settings import BackendSettings, add_backend_flags, backend_settings
from ..prompt import PromptSet, add_prompt_flags, load_prompts


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the backend flags (agent.backends.settings) and the prompt flags (agent.prompt)."""
    group = parser.add_argument_group("model backend")
    add_backend_flags(group)
    add_prompt_flags(group)


def backend_choice(args: argparse.Namespace) -> BackendSettings:
    """Check the backend options together and read the API key from the environment."""
    return backend_settings(vars(args), os.environ)


def prompts_from_args(args: argparse.Namespace) -> PromptSet:
    """The prompts the options ask for: ours, or the reference agent's, with file overrides."""
    return load_prompts(args.reference_agent, args.system_prompt, args.user_template)
