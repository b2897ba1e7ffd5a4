"""`sqale-mcp`'s settings as a user gives them: its command line, its config file (the top-level keys
and the [db], [notes], [verified], [hide] and [tokens.NAME] tables) and the `SQALE_*` variables,
merged into one ServerSettings; and the options of the module-level server (`mcp dev`).

Reading the file and which layer wins: agent/settings.py.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from pydantic import BaseModel, ValidationError

from agent import (
    BACKEND_FLAGS,
    PROMPT_FLAGS,
    ConfigError,
    SuggestingParser,
    add_flags,
    add_version_flag,
    check_alias,
    default_config_path,
    layered,
    parse_hide_rule,
    problem_text,
    read_config_file,
    read_secret,
    setting_name,
    table_settings,
    with_secrets,
)

from .. import PROG
from .server_settings import ServerSettings
from .settings_parts import AliasFile, DatabaseSpec, HideSpec, TokenSpec

_HELP_HINT = "see `sqale-mcp --help`"
ARGS_ENV = "SQALE_MCP_ARGS"  # options for the module-level server of `mcp dev` / `mcp run`


class _Parser(SuggestingParser):
    """argparse that raises ConfigError instead of printing usage and exiting (naming the nearest
    option for a mistyped one)."""

    def fail(self, message: str) -> NoReturn:
        raise ConfigError(f"{message} ({_HELP_HINT})" if message.endswith("?") else f"{message}; {_HELP_HINT}")


# The flags of `sqale-mcp --help` and docs/options.md, by group; each is a ServerSettings field.
FLAG_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("databases", ("databases", "db_dir", "db_dir_outside_links", "demo", "notes", "max_notes_chars", "hide")),
    ("verified answers", ("verified", "verified_hints", "verified_writable")),
    ("model backend", BACKEND_FLAGS),
    (
        "answers",
        (
            "max_rows",
            "max_result_bytes",
            "query_timeout",
            "episode_timeout",
            "max_concurrent",
            "runtime_slots",
            "samples",
            "max_samples",
            "seed",
        ),
    ),
    (
        "within the client's patience",
        ("call_budget", "one_call_answers", "working_timeout", "token_max_working"),
    ),
    ("what the model reads", (*PROMPT_FLAGS, "environment")),
    (
        "serving",
        (
            "transport",
            "host",
            "port",
            "auth_token_env",
            "token_max_concurrent",
            "token_per_minute",
            "max_sessions",
            "token_max_sessions",
            "session_idle_timeout",
            "http_header_timeout",
            "http_body_timeout",
            "http_max_connections",
            "metrics_token_env",
            "drain_timeout",
        ),
    ),
    ("asking the person", ("ask_to_choose", "ask_samples", "ask_timeout", "request_state_key_env")),
    ("answer view", ("answer_view",)),
    ("logs", ("episode_log", "log_level", "log_format", "trace_content")),
)
CONFIG_HELP = (
    "TOML file with the same settings, keys named as the long options (see docs/options.md); "
    "flags and SQALE_* variables win over it (default: $XDG_CONFIG_HOME/sqale-mcp/config.toml, "
    "else ~/.config/sqale-mcp/config.toml, when no database option is given)"
)
DESCRIPTION = (
    "MCP server with one tool, answer_sql_question: a small local text-to-SQL model explores your "
    "SQLite databases and returns SQL with its result."
)
# The settings given per database: `--db ALIAS=PATH` (in the file, a [db] table of alias = "path"
# lines), `--notes`, `--verified` and `--hide ALIAS=RULE` ([hide]: alias = [rules] lines): how the
# flag's value is written, an example of it, and an example of the table's line.
PER_ALIAS = {
    "databases": ("ALIAS=PATH", "chinook=~/data/chinook.db", '"data/chinook.db"'),
    "notes": ("ALIAS=PATH", "chinook=~/notes/chinook.txt", '"data/chinook-notes.txt"'),
    "verified": ("ALIAS=PATH", "chinook=~/chinook-verified.jsonl", '"data/chinook-verified.jsonl"'),
    "hide": ("ALIAS=TABLE or ALIAS=TABLE.COLUMN", "chinook=Customer.Email", '["Customer.Email", "Invoice"]'),
}


def build_parser() -> argparse.ArgumentParser:
    """The `sqale-mcp` command line; every default is None so the config file can fill it."""
    p = _Parser(prog=PROG, description=DESCRIPTION)
    add_version_flag(p)
    p.add_argument("--config", type=Path, metavar="FILE.toml", help=CONFIG_HELP)
    for title, names in FLAG_GROUPS:
        add_flags(p.add_argument_group(title), ServerSettings, *names)
    return p


def parse_settings(argv: Sequence[str], environ: Mapping[str, str]) -> ServerSettings:
    """Parse flags, SQALE_* variables and the config file into settings; ConfigError if invalid.

    A flag wins over its variable, which wins over the file. Without --config and without any
    database option, the default config file is read when it exists
    ($XDG_CONFIG_HOME/sqale-mcp/config.toml, else ~/.config/sqale-mcp/config.toml).
    """
    args = vars(build_parser().parse_args(list(argv)))
    config_path: Path | None = args.pop("config")
    if config_path is None and not (args["databases"] or args["db_dir"] or args["demo"]):
        # Plain `sqale-mcp`: the user's config file, as `mcp dev` reads it.
        default = default_config_path(environ)
        config_path = default if default.is_file() else None
    file_values = read_config_file(config_path, ServerSettings) if config_path is not None else {}
    per_alias = {
        name: by_alias(name, args.pop(name) or [], file_values.pop(name, {}), config_path) for name in PER_ALIAS
    }
    layers = layered(ServerSettings, args, environ, file_values, str(config_path))
    values: dict[str, Any] = {**layers.values, **per_alias}
    if "tokens" in values:
        values["tokens"] = file_tokens(values["tokens"], environ, config_path or Path("?"))
    try:
        return ServerSettings(**with_secrets(ServerSettings, values, environ))
    except ValidationError as exc:
        raise ConfigError(f"{problem_text(exc, ServerSettings, layers)}; {_HELP_HINT}") from exc


def by_alias(name: str, flags: Sequence[str], table: object, config: Path | None) -> tuple[BaseModel, ...]:
    """A per-database setting (PER_ALIAS) as its specs: the config file's table, then the flags. A flag's
    path replaces the file's for its alias (an alias twice in --db is refused); a --hide rule adds to
    the file's rules. Paths in the file are relative to it; ConfigError naming the flag or the line."""
    form, example, line = PER_ALIAS[name]
    key, hide = setting_name(ServerSettings, name), name == "hide"
    if not isinstance(table, dict):
        kind = "[rules]" if hide else '"path"'
        raise ConfigError(
            f"--config {config}: `{key}` must be a table of alias = {kind} lines, "
            f"e.g. [{key}]\\nchinook = {line}"
        )
    base = config.expanduser().resolve().parent if config is not None else Path()
    out: dict[str, tuple[str, ...]] = {}
    for alias, value in table.items():
        where = f"--config {config}: {key}.{alias}"
        listed = [value] if isinstance(value, str) else value
        if hide and not (isinstance(listed, list) and all(isinstance(rule, str) for rule in listed)):
            raise ConfigError(
                f'{where} must be a list of "TABLE" or "TABLE.COLUMN" strings, e.g. [{key}]\\nchinook = {line}'
            )
        if not hide and not (isinstance(value, str) and value.strip()):
            raise ConfigError(f"{where} must be a path string, e.g. [{key}]\\nchinook = {line}")
        out[check_alias(alias, where)] = tuple(_value(name, v, where, base) for v in listed)
    given: dict[str, str] = {}
    for item in flags:
        alias, sep, value = item.partition("=")
        where = f"--{key} {item!r}"
        if not sep or not value.strip():
            raise ConfigError(f"{where}: write it as {form}, e.g. --{key} {example}")
        alias = check_alias(alias.strip(), where)
        if name == "databases" and alias in given:
            raise ConfigError(
                f"database alias '{alias}' is given twice (--db {given[alias]} and --db {item}); "
                "rename one with --db OTHER_ALIAS=PATH"
            )
        given[alias] = item
        out[alias] = (*(out.get(alias, ()) if hide else ()), _value(name, value, where, None))
    if hide:
        return tuple(HideSpec(alias=alias, rules=rules) for alias, rules in out.items())
    spec = DatabaseSpec if name == "databases" else AliasFile
    return tuple(spec(alias=alias, path=Path(paths[0])) for alias, paths in out.items())


def _value(name: str, value: str, where: str, base: Path | None) -> str:
    """A hide rule (ConfigError naming `where` when malformed), or a path: in the file, relative to
    its folder `base`."""
    if name == "hide":
        parse_hide_rule(value, where)
        return value.strip()
    path = Path(value.strip()).expanduser()
    return str(path if base is None else base / path)


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
        values = table_settings(entry, TokenSpec, where=where, base=path.parent)
        secret = read_secret(values.get("env"), environ, f"{where}.env")
        try:
            specs.append(TokenSpec(**values, name=name, secret=secret))
        except ValidationError as exc:
            problem = problem_text(exc, TokenSpec, table=f"tokens.{name}")
            raise ConfigError(f"--config {path}: {problem}") from exc
    return tuple(specs)


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
