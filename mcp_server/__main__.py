"""`sqale-mcp` and `python -m mcp_server`: parse the settings, build the server, serve."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from agent.errors import ConfigError, PromptConfigError

from .app import build_server, configure_logging
from .settings import parse_settings


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server; exit 2 with one line on stderr when the configuration is wrong."""
    try:
        settings = parse_settings(sys.argv[1:] if argv is None else argv, os.environ)
        configure_logging(settings.log_level, settings.log_format)
        server = build_server(settings, environ=os.environ)
    except (ConfigError, PromptConfigError) as exc:
        print(f"sqale-mcp: {exc}", file=sys.stderr)
        return 2
    try:
        server.run()
    except KeyboardInterrupt:  # Ctrl-C is how a foreground server is stopped
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
