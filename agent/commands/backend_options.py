"""Command-line options that choose the model backend and prompts, shared by the commands that run episodes.

The backend's settings come, in this order, from the flags, the `SQALE_*` environment
variables and the config file the server reads (--config, else the default one when it
exists); see agent/settings.py.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..agent_settings import PROMPT_FLAGS, AgentSettings
from ..backends.registry import BACKEND_FLAGS, BackendSettings, add_backend_flags, backend_settings
from ..options import add_flags
from ..prompt import PromptSet
from ..prompt_files import load_prompts
from ..settings import Layered, default_config_path, layered, read_config_file

CONFIG_HELP = (
    "the config file to take the model runtime's settings from (backend, model, addresses, "
    "runtime slots; the server's other keys are left alone); flags and SQALE_* variables win "
    "(default: $XDG_CONFIG_HOME/sqale-mcp/config.toml, else ~/.config/sqale-mcp/config.toml, "
    "when it exists)"
)


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --config, the backend flags (agent.backends.registry) and the prompt flags."""
    group = parser.add_argument_group("model backend")
    group.add_argument("--config", type=Path, metavar="FILE.toml", help=CONFIG_HELP)
    add_backend_flags(group)
    add_flags(group, AgentSettings, *PROMPT_FLAGS)


def config_path(args: argparse.Namespace, environ: Mapping[str, str]) -> Path | None:
    """The config file the command reads: --config, else the default one if it exists."""
    if args.config is not None:
        return Path(args.config)
    default = default_config_path(environ)
    return default if default.is_file() else None


def command_settings(args: argparse.Namespace, names: tuple[str, ...], environ: Mapping[str, str]) -> Layered:
    """The AgentSettings fields `names`, from the flags, the SQALE_* variables and the config file."""
    path = config_path(args, environ)
    file_values = read_config_file(path, AgentSettings, others="ignore") if path is not None else {}
    flags: dict[str, Any] = {name: getattr(args, name, None) for name in names}
    return layered(
        AgentSettings, flags, environ, {k: v for k, v in file_values.items() if k in names}, str(path)
    )


def backend_choice(args: argparse.Namespace) -> BackendSettings:
    """Check the backend options together and read the API key from the environment."""
    layers = command_settings(args, BACKEND_FLAGS, os.environ)
    return backend_settings(layers.values, os.environ, layers)


def prompts_from_args(args: argparse.Namespace) -> PromptSet:
    """The prompts the options ask for: ours, or the reference agent's, with file overrides."""
    return load_prompts(
        args.reference_agent, args.system_prompt, args.user_template, args.assistant_prefix or ""
    )
