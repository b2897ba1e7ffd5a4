"""The module-level server object, for `mcp dev mcp_server/server.py` and `mcp run`.

Those commands take no server options, so the settings come, in this order, from:
1. the environment variable SQALE_MCP_ARGS, holding `sqale-mcp` command-line options, e.g.
   `SQALE_MCP_ARGS="--db chinook=/data/Chinook.sqlite" mcp run mcp_server/server.py`;
2. the config file ~/.config/sqale-mcp/config.toml ($XDG_CONFIG_HOME/sqale-mcp/config.toml),
   when it exists (the MCP Inspector started by `mcp dev` passes few environment variables
   on, but HOME is one of them);
3. otherwise `--demo`: the demo database.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __package__ in (None, ""):
    # `mcp dev`/`mcp run` load this file by path, with mcp_server/ (not the repo) on sys.path.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent import ConfigError, PromptConfigError, start_telemetry
from mcp_server.app import SERVICE, SqaleServer, build_server, configure_logging
from mcp_server.config.command_line import module_server_arguments, parse_settings


def server_from_environment() -> SqaleServer:
    """Build the server from module_server_arguments(); exit 2 on a bad configuration."""
    argv, source = module_server_arguments(os.environ)
    try:
        settings = parse_settings(argv, os.environ)
        configure_logging(settings.log_level, settings.log_format)
        start_telemetry(SERVICE)
        return build_server(settings, environ=os.environ)
    except (ConfigError, PromptConfigError) as exc:
        print(f"sqale-mcp ({source}): {exc}", file=sys.stderr)
        raise SystemExit(2) from exc


server = server_from_environment()
