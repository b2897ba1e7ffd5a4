"""The `sqale-mcp` command line, and merging it with the config file and environment into settings."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from pydantic import ValidationError

from agent import package_version
from agent.backends.settings import add_backend_flags, read_secret, validation_message, with_api_key
from agent.errors import ConfigError
from agent.notes import DEFAULT_MAX_NOTES_CHARS
from agent.prompt import add_prompt_flags
from agent.sqlite.hiding import parse_hide_rule
from agent.tools.environment import DEFAULT_ENVIRONMENT, ENVIRONMENT_NAMES

from .config_file import default_config_path, file_tokens, read_config_file
from .settings import (
    TOKEN_SESSIONS,
    DatabaseSpec,
    HideSpec,
    NotesSpec,
    ServerSettings,
    VerifiedSpec,
    check_alias,
)

_HELP_HINT = "see `sqale-mcp --help`"


class _Parser(argparse.ArgumentParser):
    """argparse that raises ConfigError instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message}; {_HELP_HINT}")


def _default(name: str) -> str:
    """A ServerSettings field's default as the help text shows it (10.0 -> 10)."""
    value = ServerSettings.model_fields[name].default
    return f"{value:g}" if isinstance(value, float) else str(value)


def build_parser() -> argparse.ArgumentParser:
    """The `sqale-mcp` command line; every default is None so the config file can fill it."""
    p = _Parser(prog="sqale-mcp", description=(
        "MCP server with one tool, answer_sql_question: a small local text-to-SQL model "
        "explores your SQLite databases and returns SQL with its result."))
    p.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    p.add_argument("--config", type=Path, metavar="FILE.toml",
                   help="TOML file with the same settings (keys as the long options); flags win")
    p.add_argument("--db", action="append", metavar="ALIAS=PATH",
                   help="a database to serve under ALIAS (repeatable)")
    p.add_argument("--notes", action="append", metavar="ALIAS=FILE",
                   help="a UTF-8 file of facts about that database's data, one per line, read "
                        "with every question about it (repeatable)")
    p.add_argument("--max-notes-chars", type=int, metavar="N",
                   help=f"longest notes allowed per database (default {DEFAULT_MAX_NOTES_CHARS:,})")
    p.add_argument("--hide", action="append", metavar="ALIAS=TABLE[.COLUMN]",
                   help="hide a table or column of database ALIAS from the model (repeatable; "
                        "globs such as '*.password*' allowed, case-insensitive)")
    p.add_argument("--verified", action="append", metavar="ALIAS=FILE",
                   help="a verified library for database ALIAS: golden questions (JSON Lines, as "
                        "`sqale-agent golden add` writes them) answered at once when asked again, and "
                        "listed when a similar question is asked (repeatable)")
    p.add_argument("--verified-hints", action="store_true", default=None,
                   help="also give the model the most similar verified answers as evidence (off by "
                        "default: measure it first with `sqale-agent eval --verified-hints`)")
    p.add_argument("--verified-writable", action="store_true", default=None,
                   help="let the answer view's 'Save as verified' append to the libraries")
    p.add_argument("--db-dir", type=Path, metavar="DIR",
                   help="serve every *.sqlite, *.sqlite3 and *.db file in DIR (alias = file stem)")
    p.add_argument("--demo", action="store_true", default=None,
                   help="also serve a small demo database (alias 'bookshop') built on first use")
    add_backend_flags(p)
    p.add_argument("--max-rows", type=int, metavar="N",
                   help=f"rows returned per answer (default {_default('max_rows')})")
    p.add_argument("--max-result-bytes", type=int, metavar="N",
                   help="bytes an answer's rows may weigh as JSON; cells, columns and rows are cut "
                        f"to fit (default {_default('max_result_bytes')})")
    p.add_argument("--query-timeout", type=float, metavar="SECONDS",
                   help=f"limit for one SQL statement (default {_default('query_timeout')})")
    p.add_argument("--episode-timeout", type=float, metavar="SECONDS",
                   help="limit for answering one question "
                        f"(default {_default('episode_timeout')})")
    p.add_argument("--max-concurrent", type=int, metavar="N",
                   help="questions answered at once; more wait in a queue "
                        f"(default {_default('max_concurrent')})")
    p.add_argument("--runtime-slots", type=int, metavar="N",
                   help="questions talking to the model at once, each keeping its slot for all its "
                        "rounds (default: $OLLAMA_NUM_PARALLEL or 1 for Ollama, 4 per --base-url)")
    p.add_argument("--samples", type=int, metavar="K",
                   help=f"episodes per question by default; K > 1 votes by execution result "
                        f"(default {_default('samples')})")
    p.add_argument("--max-samples", type=int, metavar="K",
                   help=f"the most samples a caller may ask for (default {_default('max_samples')})")
    p.add_argument("--seed", type=int, metavar="N",
                   help="sampling seed: sample k uses N + k (default: the runtime's own for one "
                        "sample, a random base for several)")
    add_prompt_flags(p)
    p.add_argument("--episode-log", type=Path, metavar="PATH",
                   help="append one JSON line per answered question (audit)")
    p.add_argument("--environment", choices=ENVIRONMENT_NAMES,
                   help="the texts the model reads: the tool outputs and turn texts it was trained "
                        f"with ({DEFAULT_ENVIRONMENT}, default) or our richer ones (rich)")
    p.add_argument("--transport", choices=("stdio", "streamable-http"),
                   help="stdio (default) or streamable-http")
    p.add_argument("--host", help=f"HTTP listen address (default {_default('host')})")
    p.add_argument("--port", type=int, help=f"HTTP port (default {_default('port')})")
    p.add_argument("--auth-token-env", metavar="NAME",
                   help="environment variable holding the HTTP bearer token (required off loopback)")
    p.add_argument("--token-max-concurrent", type=int, metavar="N",
                   help=f"episodes one token may have running at once (a question with K samples "
                        f"is K); more wait (default {_default('token_max_concurrent')})")
    p.add_argument("--token-per-minute", type=int, metavar="M",
                   help=f"episodes one token may start per minute (a question with K samples is "
                        f"K); more are refused (default {_default('token_per_minute')})")
    p.add_argument("--max-sessions", type=int, metavar="N",
                   help=f"HTTP sessions open at once over all tokens (default {_default('max_sessions')})")
    p.add_argument("--token-max-sessions", type=int, metavar="N",
                   help="HTTP sessions one token may have open at once, below --max-sessions "
                        f"(default {TOKEN_SESSIONS} or half of --max-sessions, whichever is less)")
    p.add_argument("--session-idle-timeout", type=float, metavar="SECONDS",
                   help="an HTTP session without a request for this long is closed "
                        f"(default {_default('session_idle_timeout')})")
    p.add_argument("--http-header-timeout", type=float, metavar="SECONDS",
                   help="an HTTP connection must send a request's headers within this long of "
                        f"opening or of its last response (default {_default('http_header_timeout')})")
    p.add_argument("--http-body-timeout", type=float, metavar="SECONDS",
                   help="an HTTP request's body must arrive within this long "
                        f"(default {_default('http_body_timeout')})")
    p.add_argument("--http-max-connections", type=int, metavar="N",
                   help="HTTP connections open at once; more are closed at once "
                        f"(default {_default('http_max_connections')})")
    p.add_argument("--metrics-token-env", metavar="NAME",
                   help="environment variable holding the bearer token for GET /metrics (HTTP mode)")
    p.add_argument("--drain-timeout", type=float, metavar="SECONDS",
                   help="on SIGTERM, time for questions in flight to finish "
                        f"(default {_default('drain_timeout')})")
    p.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"), type=str.upper,
                   help=f"stderr log level, any case (default {_default('log_level')}; "
                        "DEBUG shows each model request)")
    p.add_argument("--log-format", choices=("text", "json"),
                   help="stderr log lines as text (default) or one JSON object per line")
    return p


def parse_settings(argv: Sequence[str], environ: Mapping[str, str]) -> ServerSettings:
    """Parse flags (and the --config file they name) into settings; raise ConfigError if invalid.

    Without --config and without any database option, the default config file is read when it
    exists ($XDG_CONFIG_HOME/sqale-mcp/config.toml, else ~/.config/sqale-mcp/config.toml).
    """
    args = vars(build_parser().parse_args(list(argv)))
    config_path: Path | None = args.pop("config")
    if config_path is None and not (args["db"] or args["db_dir"] or args["demo"]):
        # Plain `sqale-mcp`: the user's config file, as `mcp dev` reads it.
        default = default_config_path(environ)
        config_path = default if default.is_file() else None
    values = read_config_file(config_path) if config_path is not None else {}
    flag_dbs = parse_db_flags(args.pop("db") or [])
    file_dbs: dict[str, Path] = values.pop("db", {})
    flag_notes = parse_alias_files(args.pop("notes") or [], "--notes",
                                   "--notes chinook=~/notes/chinook.txt")
    file_notes: dict[str, Path] = values.pop("notes", {})
    flag_verified = parse_alias_files(args.pop("verified") or [], "--verified",
                                      "--verified chinook=~/chinook-verified.jsonl")
    file_verified: dict[str, Path] = values.pop("verified", {})
    hidden: dict[str, tuple[str, ...]] = dict(values.pop("hide", {}))
    for alias, rules in parse_hide_flags(args.pop("hide") or []).items():
        hidden[alias] = (*hidden.get(alias, ()), *rules)  # flags add to the file's rules
    base_urls = args.pop("base_url")
    if base_urls is not None:
        values["base_urls"] = tuple(base_urls)
    values.update({k: v for k, v in args.items() if v is not None})
    values["databases"] = tuple(
        DatabaseSpec(alias=a, path=p) for a, p in ({**file_dbs, **flag_dbs}).items())
    values["notes"] = tuple(
        NotesSpec(alias=a, path=p) for a, p in ({**file_notes, **flag_notes}).items())
    values["hide"] = tuple(HideSpec(alias=a, rules=r) for a, r in hidden.items())
    values["verified"] = tuple(
        VerifiedSpec(alias=a, path=p) for a, p in ({**file_verified, **flag_verified}).items())
    if values.get("auth_token_env") is not None:
        values["auth_token"] = read_secret(values["auth_token_env"], environ, "--auth-token-env")
    if values.get("metrics_token_env") is not None:
        values["metrics_token"] = read_secret(values["metrics_token_env"], environ, "--metrics-token-env")
    if "tokens" in values:
        values["tokens"] = file_tokens(values["tokens"], environ, config_path or Path("?"))
    try:
        return ServerSettings(**with_api_key(values, environ))
    except ValidationError as exc:
        raise ConfigError(f"{validation_message(exc)}; {_HELP_HINT}") from exc


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


def parse_alias_files(items: Sequence[str], flag: str, example: str) -> dict[str, Path]:
    """`ALIAS=PATH` strings of `flag` into a mapping; a later alias replaces an earlier one."""
    out: dict[str, Path] = {}
    for item in items:
        alias, sep, path = item.partition("=")
        if not sep or not path.strip():
            raise ConfigError(f"{flag} {item!r}: write it as ALIAS=PATH, e.g. {example}")
        out[check_alias(alias.strip(), f"{flag} {item!r}")] = Path(path.strip()).expanduser()
    return out


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
