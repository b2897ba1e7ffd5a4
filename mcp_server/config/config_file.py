"""The server's part of the config file: its tables ([db], [notes], [verified], [hide], [tokens.NAME]), and
the options of the module-level server. Finding and reading the file: agent.settings.config_file."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent.errors import ConfigError
from agent.settings.aliases import check_alias
from agent.settings.config_file import default_config_path, read_config_file, table_settings
from agent.settings.layers import problem_text, read_secret
from agent.sqlite.hiding import parse_hide_rule

from .server_settings import ServerSettings, TokenSpec

ARGS_ENV = "SQALE_MCP_ARGS"  # options for the module-level server of `mcp dev` / `mcp run`
TOKEN_GIVEN = ("name",)  # the TokenSpec field a [tokens.NAME] table's header gives, not a key of it


def module_server_arguments(environ: Mapping[str, str]) -> tuple[list[str], str]:
    """Options for the module-level server (`mcp dev`/`mcp run`), and where they came from.

    $SQALE_MCP_ARGS if set, else the default config file if it exists, else `--demo`.
    """
    if environ.get(ARGS_ENV, "").strip():
        return shlex.split(environ[ARGS_ENV]), f"{ARGS_ENV}={environ[ARGS_ENV]!r}"
    config = default_config_path(environ)
    if config.is_file():
        return ["--config", str(config)], str(config)
    return ["--demo"], f"no {ARGS_ENV} and no {config}: --demo"


def read_server_config(path: Path) -> dict[str, Any]:
    """Every setting in the config file at `path`, by field name: its [db], [notes] and [hide]
    tables as aliases to paths and rules (`tokens` is read by `file_tokens`)."""
    values = read_config_file(path, ServerSettings)
    base = path.expanduser().resolve().parent
    for name, table in (("databases", "db"), ("notes", "notes"), ("verified", "verified")):
        if name in values:
            values[name] = _file_alias_paths(table, values[name], path, base)
    if "hide" in values:
        values["hide"] = _file_hide_rules(values["hide"], path)
    return values


def file_tokens(table: object, environ: Mapping[str, str], path: Path) -> tuple[TokenSpec, ...]:
    """The [tokens.NAME] tables, each validated as a TokenSpec, its secret read from the variable it names."""
    example = '[tokens.analytics]\\nenv = "SQALE_TOKEN_ANALYTICS"\\ndatabases = ["sales"]'
    if not isinstance(table, dict):
        raise ConfigError(f"--config {path}: `tokens` must be tables like {example}")
    specs = []
    for name, entry in table.items():
        where = f"--config {path}: tokens.{name}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where} must be a table like {example}")
        check_alias(name, where)  # the same safe characters as an alias: it is logged
        values = table_settings(entry, TokenSpec, where=where, base=path.parent, given=TOKEN_GIVEN)
        secret = read_secret(values.get("env"), environ, f"{where}.env")
        try:
            specs.append(TokenSpec(**values, name=name, secret=secret))
        except ValidationError as exc:
            problem = problem_text(exc, TokenSpec, table=f"tokens.{name}")
            raise ConfigError(f"--config {path}: {problem}") from exc
    return tuple(specs)


def _file_alias_paths(name: str, table: object, path: Path, base: Path) -> dict[str, Path]:
    """The [db], [notes] or [verified] table: alias = "path" lines, paths relative to the config file."""
    example = {"db": "chinook.db", "notes": "chinook-notes.txt"}.get(name, "chinook-verified.jsonl")
    if not isinstance(table, dict):
        raise ConfigError(f"--config {path}: `{name}` must be a table of alias = \"path\" lines, "
                          f"e.g. [{name}]\\nchinook = \"data/{example}\"")
    out: dict[str, Path] = {}
    for alias, file_path in table.items():
        if not isinstance(file_path, str) or not file_path.strip():
            raise ConfigError(f"--config {path}: {name}.{alias} must be a path string")
        out[check_alias(alias, f"--config {path}: {name}.{alias}")] = base / Path(file_path).expanduser()
    return out


def _file_hide_rules(table: object, path: Path) -> dict[str, tuple[str, ...]]:
    example = '[hide]\\nchinook = ["Customer.Email", "Invoice"]'
    if not isinstance(table, dict):
        raise ConfigError(f"--config {path}: `hide` must be a table of alias = [rules] lines, "
                          f"e.g. {example}")
    out: dict[str, tuple[str, ...]] = {}
    for alias, rules in table.items():
        where = f"--config {path}: hide.{alias}"
        listed = [rules] if isinstance(rules, str) else rules
        if not isinstance(listed, list) or not all(isinstance(r, str) for r in listed):
            raise ConfigError(f"{where} must be a list of \"TABLE\" or \"TABLE.COLUMN\" strings, "
                              f"e.g. {example}")
        for rule in listed:
            parse_hide_rule(rule, where)
        out[check_alias(alias, where)] = tuple(r.strip() for r in listed)
    return out
