"""The optional TOML config file: where it is, what it may hold, and reading it into values."""

from __future__ import annotations

import shlex
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent.backends.settings import read_secret, validation_message
from agent.errors import ConfigError
from agent.sqlite.hiding import parse_hide_rule

from .settings import ServerSettings, TokenSpec, check_alias

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


def default_config_path(environ: Mapping[str, str]) -> Path:
    """$XDG_CONFIG_HOME/sqale-mcp/config.toml, else ~/.config/sqale-mcp/config.toml."""
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "sqale-mcp" / "config.toml"


# Settings a config file may hold, by field name; `db` is the [db] alias table.
_FILE_KEYS = frozenset(ServerSettings.model_fields) - {"databases", "notes", "verified", "api_key",
                                                       "auth_token", "base_urls", "metrics_token"}
_FILE_KEYS_WITH_ALIASES = _FILE_KEYS | {"db", "notes", "verified", "base_url"}
_PATH_KEYS = ("db_dir", "reference_agent", "system_prompt", "user_template", "episode_log")


def read_config_file(path: Path) -> dict[str, Any]:
    """Settings from a TOML file; relative paths are taken relative to the file's folder."""
    try:
        raw = tomllib.loads(path.expanduser().read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"--config {path}: no such file; check the path") from exc
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot be read ({exc.strerror})") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--config {path}: not valid TOML ({exc}); fix the file") from exc
    base = path.expanduser().resolve().parent
    values: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in _FILE_KEYS_WITH_ALIASES:
            raise ConfigError(
                f"--config {path}: unknown setting {key!r}; known: "
                f"{', '.join(sorted(k.replace('_', '-') for k in _FILE_KEYS_WITH_ALIASES))}")
        values[name] = value
    for table in ("db", "notes", "verified"):
        if table in values:
            values[table] = _file_alias_paths(table, values[table], path, base)
    if "hide" in values:
        values["hide"] = _file_hide_rules(values["hide"], path)
    if "base_url" in values:
        urls = values.pop("base_url")
        values["base_urls"] = tuple(urls) if isinstance(urls, list) else (urls,)
    for key in _PATH_KEYS:
        if isinstance(values.get(key), str):
            values[key] = base / Path(values[key]).expanduser()
    return values


_TOKEN_KEYS = ("env", "databases", "max_concurrent", "questions_per_minute", "max_sessions")


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
                max_sessions=entry.get("max_sessions")))
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
