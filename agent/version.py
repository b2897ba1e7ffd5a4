"""The installed version of sqale-mcp, for `--version` and the MCP server's info."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "sqale-mcp"


def package_version() -> str:
    """The installed sqale-mcp version, or 0+unknown when running from a plain checkout."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"
