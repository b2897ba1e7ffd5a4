"""Server settings: parsed once from flags, an optional TOML file and the environment."""

from __future__ import annotations

import argparse
import ipaddress
import re
import shlex
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from agent import package_version
from agent.backends.settings import (
    BackendSettings,
    add_backend_flags,
    read_secret,
    validation_message,
    with_api_key,
)
from agent.errors import ConfigError
from agent.notes import DEFAULT_MAX_NOTES_CHARS
from agent.sqlite.hiding import parse_hide_rule
from agent.tools.environment import DEFAULT_ENVIRONMENT, ENVIRONMENT_NAMES, Environment

ARGS_ENV = "SQALE_MCP_ARGS"  # options for the module-level server of `mcp dev` / `mcp run`
ALIAS_PATTERN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
_HELP_HINT = "see `sqale-mcp --help`"


class DatabaseSpec(BaseModel):
    """One database the server answers about: the alias clients use and the file behind it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    alias: str
    path: Path
    skippable: bool = False  # found by --db-dir: a bad file is skipped with a warning


class TokenSpec(BaseModel):
    """One client token of HTTP mode: its name (logged), its variable, and the aliases it may use."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    env: str
    secret: SecretStr  # read from the variable `env` names, never from a file
    databases: tuple[str, ...] | None = None  # None: every configured database
    max_concurrent: int | None = Field(None, ge=1, le=1_024)  # None: --token-max-concurrent
    questions_per_minute: int | None = Field(None, ge=1, le=100_000)  # None: --token-per-minute


class NotesSpec(BaseModel):
    """A notes file (facts about the data, one per line) for the database under `alias`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    alias: str
    path: Path


class HideSpec(BaseModel):
    """Tables and columns of one database the model may not see or read."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    alias: str
    rules: tuple[str, ...]


class ServerSettings(BackendSettings):
    """Everything the server needs to start; frozen, validated once at the edge.

    The model backend's fields (backend, model, base_urls...) come from BackendSettings.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    databases: tuple[DatabaseSpec, ...] = ()  # from --db and the config file's [db] table
    notes: tuple[NotesSpec, ...] = ()  # from --notes and the config file's [notes] table
    max_notes_chars: int = Field(DEFAULT_MAX_NOTES_CHARS, ge=1, le=100_000)
    hide: tuple[HideSpec, ...] = ()  # from --hide and the config file's [hide] table
    db_dir: Path | None = None
    demo: bool = False
    max_rows: int = Field(50, ge=1, le=10_000)
    # What an answer's rows may weigh as JSON; the SQLite worker cuts to fit before the rows
    # reach the server, so the whole answer (text and structured content) stays well under 1 MB.
    max_result_bytes: int = Field(262_144, ge=4_096, le=64 * 1024 * 1024)
    query_timeout: float = Field(10.0, gt=0, le=3_600)
    episode_timeout: float = Field(300.0, gt=0, le=86_400)
    max_concurrent: int = Field(4, ge=1, le=64)
    runtime_slots: int | None = Field(None, ge=1, le=256)  # None: the backend's default, at start
    samples: int = Field(1, ge=1, le=64)  # default K: episodes per question, voting by result
    max_samples: int = Field(8, ge=1, le=64)  # the most a caller may ask for
    seed: int | None = Field(None, ge=0)  # sample k samples with seed + k; None: drawn per question
    reference_agent: Path | None = None
    system_prompt: Path | None = None
    user_template: Path | None = None
    episode_log: Path | None = None
    environment: Environment = DEFAULT_ENVIRONMENT  # which texts the model reads
    transport: Literal["stdio", "streamable-http"] = "stdio"
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65_535)
    auth_token_env: str | None = None
    auth_token: SecretStr | None = None  # read from the variable named by auth_token_env
    tokens: tuple[TokenSpec, ...] = ()  # the config file's [tokens.NAME] tables
    token_max_concurrent: int = Field(16, ge=1, le=1_024)  # per token; more wait in its queue
    token_per_minute: int = Field(600, ge=1, le=100_000)  # questions per token per minute
    metrics_token_env: str | None = None
    metrics_token: SecretStr | None = None  # GET /metrics needs it; no token: no /metrics
    drain_timeout: float = Field(30.0, ge=0, le=3_600)  # SIGTERM: seconds for questions in flight
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    max_question_chars: int = Field(2_000, ge=10)
    max_evidence_chars: int = Field(4_000, ge=0)

    @field_validator("log_level", mode="before")
    @classmethod
    def _any_case(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _safe_listening(self) -> ServerSettings:
        if self.samples > self.max_samples:
            raise ValueError(f"--samples {self.samples} is above --max-samples {self.max_samples}; "
                             "lower it or raise --max-samples")
        if (self.transport == "streamable-http" and self.auth_token is None and not self.tokens
                and not is_loopback(self.host)):
            raise ValueError(
                f"refusing to listen on {self.host} without authentication: set --auth-token-env NAME "
                "(the token itself goes in that environment variable), [tokens.NAME] tables in the "
                "--config file, or use --host 127.0.0.1"
            )
        names = [t.name for t in self.tokens]
        if self.auth_token is not None and "default" in names:
            raise ValueError("[tokens.default] clashes with --auth-token-env, whose token is named "
                             "'default' in logs; rename the table")
        return self

    @property
    def has_databases(self) -> bool:
        """True when at least one source of databases is configured."""
        return bool(self.databases or self.db_dir or self.demo)


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


def is_loopback(host: str) -> bool:
    """True for localhost and loopback IP literals."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _Parser(argparse.ArgumentParser):
    """argparse that raises ConfigError instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message}; {_HELP_HINT}")


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
    p.add_argument("--db-dir", type=Path, metavar="DIR",
                   help="serve every *.sqlite, *.sqlite3 and *.db file in DIR (alias = file stem)")
    p.add_argument("--demo", action="store_true", default=None,
                   help="also serve a small demo database (alias 'bookshop') built on first use")
    add_backend_flags(p)
    p.add_argument("--max-rows", type=int, metavar="N", help="rows returned per answer (default 50)")
    p.add_argument("--max-result-bytes", type=int, metavar="N",
                   help="bytes an answer's rows may weigh as JSON; cells, columns and rows are cut "
                        "to fit (default 262144)")
    p.add_argument("--query-timeout", type=float, metavar="SECONDS",
                   help="limit for one SQL statement (default 10)")
    p.add_argument("--episode-timeout", type=float, metavar="SECONDS",
                   help="limit for answering one question (default 300)")
    p.add_argument("--max-concurrent", type=int, metavar="N",
                   help="questions answered at once; more wait in a queue (default 4)")
    p.add_argument("--runtime-slots", type=int, metavar="N",
                   help="questions talking to the model at once, each keeping its slot for all its "
                        "rounds (default: $OLLAMA_NUM_PARALLEL or 1 for Ollama, 4 per --base-url)")
    p.add_argument("--samples", type=int, metavar="K",
                   help="episodes per question by default; K > 1 votes by execution result (default 1)")
    p.add_argument("--max-samples", type=int, metavar="K",
                   help="the most samples a caller may ask for (default 8)")
    p.add_argument("--seed", type=int, metavar="N",
                   help="sampling seed: sample k uses N + k (default: the runtime's own for one "
                        "sample, a random base for several)")
    p.add_argument("--reference-agent", type=Path, metavar="sqale_agent.py",
                   help="take SYSTEM_PROMPT and USER_TEMPLATE from the authors' reference loop")
    p.add_argument("--system-prompt", type=Path, metavar="FILE",
                   help="replace the system prompt with this UTF-8 text file")
    p.add_argument("--user-template", type=Path, metavar="FILE",
                   help="replace the user turn template ({question}, {evidence}) with this file")
    p.add_argument("--episode-log", type=Path, metavar="PATH",
                   help="append one JSON line per answered question (audit)")
    p.add_argument("--environment", choices=ENVIRONMENT_NAMES,
                   help="the texts the model reads: the tool outputs and turn texts it was trained "
                        f"with ({DEFAULT_ENVIRONMENT}, default) or our richer ones (rich)")
    p.add_argument("--transport", choices=("stdio", "streamable-http"),
                   help="stdio (default) or streamable-http")
    p.add_argument("--host", help="HTTP listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="HTTP port (default 8000)")
    p.add_argument("--auth-token-env", metavar="NAME",
                   help="environment variable holding the HTTP bearer token (required off loopback)")
    p.add_argument("--token-max-concurrent", type=int, metavar="N",
                   help="questions one token may have answered at once; more wait (default 16)")
    p.add_argument("--token-per-minute", type=int, metavar="M",
                   help="questions one token may ask per minute; more are refused (default 600)")
    p.add_argument("--metrics-token-env", metavar="NAME",
                   help="environment variable holding the bearer token for GET /metrics (HTTP mode)")
    p.add_argument("--drain-timeout", type=float, metavar="SECONDS",
                   help="on SIGTERM, time for questions in flight to finish (default 30)")
    p.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"), type=str.upper,
                   help="stderr log level, any case (default INFO; DEBUG shows each model request)")
    p.add_argument("--log-format", choices=("text", "json"),
                   help="stderr log lines as text (default) or one JSON object per line")
    return p


# Settings a config file may hold, by field name; `db` is the [db] alias table.
_FILE_KEYS = frozenset(ServerSettings.model_fields) - {"databases", "notes", "api_key", "auth_token",
                                                       "base_urls", "metrics_token"}
_FILE_KEYS_WITH_ALIASES = _FILE_KEYS | {"db", "notes", "base_url"}
_PATH_KEYS = ("db_dir", "reference_agent", "system_prompt", "user_template", "episode_log")


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


def check_alias(alias: str, where: str) -> str:
    """Return `alias` if it is a valid database alias, else raise ConfigError naming `where`."""
    if not ALIAS_PATTERN.match(alias):
        raise ConfigError(
            f"{where}: alias {alias!r} is not usable; use letters, digits, '_', '-' or '.' "
            "(at most 64, not starting with '-' or '.')")
    return alias


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
    for table in ("db", "notes"):
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


_TOKEN_KEYS = ("env", "databases", "max_concurrent", "questions_per_minute")


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
                questions_per_minute=entry.get("questions_per_minute")))
        except ValidationError as exc:
            raise ConfigError(f"{where}: {validation_message(exc)}") from exc
    return tuple(specs)


def _file_alias_paths(name: str, table: object, path: Path, base: Path) -> dict[str, Path]:
    """The [db] or [notes] table: alias = "path" lines, paths relative to the config file."""
    example = "chinook.db" if name == "db" else "chinook-notes.txt"
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

