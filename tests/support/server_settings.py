"""Helpers for the server-settings and catalog tests: a one-table database, a settings error's text."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.errors import ConfigError
from agent.sqlite import create_database
from mcp_server.config.command_line import parse_settings


def make_db(path: Path, sql: str = "CREATE TABLE t (id INTEGER PRIMARY KEY);") -> Path:
    """A small SQLite file at `path` built from `sql`."""
    return create_database(path, sql)


def config_error(argv: list[str], environ: dict[str, str] | None = None) -> str:
    """The message of the ConfigError that parsing `argv` raises (fails the test if none)."""
    with pytest.raises(ConfigError) as info:
        parse_settings(argv, environ or {})
    return str(info.value)
