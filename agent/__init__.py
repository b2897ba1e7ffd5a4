"""The sqale-mcp agent: SQLite tools, the episode loop, model backends and the evaluation."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "sqale-mcp"


def package_version() -> str:
    """The installed sqale-mcp version, or 0+unknown when running from a plain checkout."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0+unknown"
