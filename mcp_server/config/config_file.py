"""The server's part of the config file: its tables ([db], [notes], [verified], [hide], [tokens.NAME]), and
the options of the module-level server. Finding and reading the file: agent.settings.config_file."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent.backends.settings import read_secret, validation_message
from agent.errors import ConfigError
from agent.settings.aliases import check_alias
from agent.settings.config_file import default_config_path, read_config_file
from agent.sqlite.hiding import parse_hide_rule

from .settings import ServerSettings, TokenSpec

ARGS_ENV = "SQALE_MCP_ARGS"  # options for the module-level server of `mcp dev` / `mcp run`


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


_TOKEN_KEYS = ("env", "databases", "max_concurrent", "questions_per_minute", "max_sessions", "save_verified")


def file_tokens(table: object, environ: Mapping[str, str], path: Path) -> tuple[TokenSpec, ...]:
    """The [tokens.NAME] tables, each secret read from the environment variable it names."""
    example = '[tokens.analytics]\\nenv = "SQALE_TOKEN_ANALYTICS"\\ndatabases = ["sales"]'
    if not isinstance(table, dict):
        raise ConfigError(f"--config {path}: `tokens` must be tables like {example}")
    specs = []
    for name, entry in table.items():
        where = f"--config {path}: tokens.{name}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where} must be a table like {example}")
        entry = {key.replace("-", "_"): value for key, value in entry.items()}
        unknown = sorted(set(entry) - set(_TOKEN_KEYS))
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r}; known: {', '.join(_TOKEN_KEYS)}")
        check_alias(name, where)  # the same safe characters as an alias: it is logged
        databases = entry.get("databases")
        if databases is not None and (not isinstance(databases, list) or not databases
                                      or not all(isinstance(d, str) for d in databases)):
            raise ConfigError(f"{where}: databases must be a non-empty list of aliases, "
                              'e.g. databases = ["sales", "chinook"] (leave it out for all)')
        secret = read_secret(entry.get("env"), environ, f"{where}.env")
        try:
            specs.append(TokenSpec(
                name=name, env=entry["env"], secret=secret,
                databases=tuple(databases) if databases is not None else None,
                max_concurrent=entry.get("max_concurrent"),
                questions_per_minute=entry.get("questions_per_minute"),
                max_sessions=entry.get("max_sessions"), save_verified=entry.get("save_verified", False)))
        except ValidationError as exc:
            raise ConfigError(f"{where}: {validation_message(exc)}") from exc
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
