"""The `sqale-mcp` command line, and merging it with the config file and environment into settings."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from pydantic import ValidationError

from agent.agent_settings import PROMPT_FLAGS
from agent.backends.registry import BACKEND_FLAGS
from agent.commands.argparse_shim import SuggestingParser
from agent.errors import ConfigError
from agent.options import add_flags
from agent.settings.aliases import check_alias, parse_alias_files
from agent.settings.config_file import default_config_path
from agent.settings.layers import layered, problem_text, with_secrets
from agent.sqlite.hiding import parse_hide_rule
from agent.version import VERSION_FLAG, VERSION_HELP, add_version_flag

from .. import PROG
from .config_file import file_tokens, read_server_config
from .server_settings import DatabaseSpec, HideSpec, NotesSpec, ServerSettings, VerifiedSpec

_HELP_HINT = "see `sqale-mcp --help`"


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
    ("answers", ("max_rows", "max_result_bytes", "query_timeout", "episode_timeout", "max_concurrent",
                 "runtime_slots", "samples", "max_samples", "seed")),
    ("within the client's patience", ("call_budget", "one_call_answers", "working_timeout",
                                      "token_max_working")),
    ("what the model reads", (*PROMPT_FLAGS, "environment")),
    ("serving", ("transport", "host", "port", "auth_token_env", "token_max_concurrent", "token_per_minute",
                 "max_sessions", "token_max_sessions", "session_idle_timeout", "http_header_timeout",
                 "http_body_timeout", "http_max_connections", "metrics_token_env", "drain_timeout")),
    ("asking the person", ("ask_to_choose", "ask_samples", "ask_timeout", "request_state_key_env")),
    ("answer view", ("answer_view",)),
    ("logs", ("episode_log", "log_level", "log_format", "trace_content")),
)
CONFIG_HELP = ("TOML file with the same settings, keys named as the long options (see docs/options.md); "
               "flags and SQALE_* variables win over it (default: $XDG_CONFIG_HOME/sqale-mcp/config.toml, "
               "else ~/.config/sqale-mcp/config.toml, when no database option is given)")


DESCRIPTION = ("MCP server with one tool, answer_sql_question: a small local text-to-SQL model explores your "
               "SQLite databases and returns SQL with its result.")
# The options that are no settings, as typed and with their help (--help and docs/options.md).
VERSION_OPTION = (VERSION_FLAG, VERSION_HELP)
CONFIG_OPTION = ("--config FILE.toml", CONFIG_HELP)


def build_parser() -> argparse.ArgumentParser:
    """The `sqale-mcp` command line; every default is None so the config file can fill it."""
    p = _Parser(prog=PROG, description=DESCRIPTION)
    add_version_flag(p)
    flag, metavar = CONFIG_OPTION[0].split()
    p.add_argument(flag, type=Path, metavar=metavar, help=CONFIG_OPTION[1])
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
    file_values = read_server_config(config_path) if config_path is not None else {}
    file_dbs: dict[str, Path] = file_values.pop("databases", {})
    file_notes: dict[str, Path] = file_values.pop("notes", {})
    file_verified: dict[str, Path] = file_values.pop("verified", {})
    hidden: dict[str, tuple[str, ...]] = dict(file_values.pop("hide", {}))
    flag_dbs = parse_db_flags(args.pop("databases") or [])
    flag_notes = parse_alias_files(args.pop("notes") or [], "--notes", "--notes chinook=~/notes/chinook.txt")
    flag_verified = parse_alias_files(args.pop("verified") or [], "--verified",
                                      "--verified chinook=~/chinook-verified.jsonl")
    for alias, rules in parse_hide_flags(args.pop("hide") or []).items():
        hidden[alias] = (*hidden.get(alias, ()), *rules)  # flags add to the file's rules
    layers = layered(ServerSettings, args, environ, file_values, str(config_path))
    values = dict(layers.values)
    values["databases"] = tuple(
        DatabaseSpec(alias=a, path=p) for a, p in ({**file_dbs, **flag_dbs}).items())
    values["notes"] = tuple(
        NotesSpec(alias=a, path=p) for a, p in ({**file_notes, **flag_notes}).items())
    values["hide"] = tuple(HideSpec(alias=a, rules=r) for a, r in hidden.items())
    values["verified"] = tuple(
        VerifiedSpec(alias=a, path=p) for a, p in ({**file_verified, **flag_verified}).items())
    if "tokens" in values:
        values["tokens"] = file_tokens(values["tokens"], environ, config_path or Path("?"))
    try:
        return ServerSettings(**with_secrets(ServerSettings, values, environ))
    except ValidationError as exc:
        raise ConfigError(f"{problem_text(exc, ServerSettings, layers)}; {_HELP_HINT}") from exc


def parse_db_flags(items: Sequence[str]) -> dict[str, Path]:
    """`ALIAS=PATH` strings into a mapping; ConfigError when an alias is given twice."""
    seen: dict[str, str] = {}
    for item in items:
        alias = item.partition("=")[0].strip()
        if alias in seen:
            raise ConfigError(f"database alias '{alias}' is given twice (--db {seen[alias]} and "
                              f"--db {item}); rename one with --db OTHER_ALIAS=PATH")
        seen[alias] = item
    return parse_alias_files(items, "--db", "--db chinook=~/data/chinook.db")


def parse_hide_flags(items: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """`ALIAS=TABLE[.COLUMN]` strings into rules per alias, in order."""
    out: dict[str, tuple[str, ...]] = {}
    for item in items:
        alias, sep, rule = item.partition("=")
        where = f"--hide {item!r}"
        if not sep or not rule.strip():
            raise ConfigError(f"{where}: write it as ALIAS=TABLE or ALIAS=TABLE.COLUMN, e.g. "
                              "--hide chinook=Customer.Email")
        parse_hide_rule(rule, where)
        key = check_alias(alias.strip(), where)
        out[key] = (*out.get(key, ()), rule.strip())
    return out
