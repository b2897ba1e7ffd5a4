"""Server settings: the frozen, validated settings object and its parts.

Parsed once at the edge: `command_line.parse_settings` merges the flags, an optional TOML
file (`config_file`) and the environment into a ServerSettings.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from agent.backends.settings import BackendSettings
from agent.errors import ConfigError
from agent.notes import DEFAULT_MAX_NOTES_CHARS
from agent.tools.environment import DEFAULT_ENVIRONMENT, Environment

TOKEN_SESSIONS = 32  # HTTP sessions one token may hold by default
# \Z, not $: `$` also matches before a final newline, and a file named "x\n.db" is possible.
ALIAS_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z")


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
    max_sessions: int | None = Field(None, ge=1, le=100_000)  # None: --token-max-sessions


class NotesSpec(BaseModel):
    """A notes file (facts about the data, one per line) for the database under `alias`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    alias: str
    path: Path


class VerifiedSpec(BaseModel):
    """The verified library (a golden-question file) served for the database under `alias`."""

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
    verified: tuple[VerifiedSpec, ...] = ()  # from --verified and the config file's [verified] table
    verified_hints: bool = False  # similar verified answers go to the model as evidence
    verified_writable: bool = False  # the answer view's "Save as verified" appends to the libraries
    db_dir: Path | None = None
    demo: bool = False
    max_rows: int = Field(50, ge=1, le=10_000)
    # What an answer's rows may weigh as JSON; the SQLite worker cuts to fit before the rows
    # reach the server. The default keeps a whole answer (text and structured content) under
    # ~40,000 characters, the 10k tokens past which Claude Code warns (answer/sizing.py).
    max_result_bytes: int = Field(16_384, ge=4_096, le=64 * 1024 * 1024)
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
    # Quotas count episodes: a question with K samples is K of them.
    token_max_concurrent: int = Field(16, ge=1, le=1_024)  # per token; more wait in its queue
    token_per_minute: int = Field(600, ge=1, le=100_000)  # episodes per token per minute
    # HTTP sessions: one token may hold fewer than the whole server, so others always find room.
    max_sessions: int = Field(1_000, ge=2, le=100_000)  # open at once, over all tokens
    token_max_sessions: int | None = Field(None, ge=1, le=100_000)  # None: see token_sessions
    session_idle_timeout: float = Field(600.0, gt=0, le=86_400)  # no request for this long: closed
    # Slow or silent HTTP clients: each connection's request headers and body must arrive in time.
    http_header_timeout: float = Field(10.0, gt=0, le=600)
    http_body_timeout: float = Field(30.0, gt=0, le=3_600)
    http_max_connections: int = Field(512, ge=8, le=1_000_000)  # more are closed at once
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
        if self.verified_writable and not self.verified:
            raise ValueError("--verified-writable needs a library to write to: add --verified ALIAS=FILE "
                             "(or a [verified] table in the config file)")
        for name, cap in [("--token-max-sessions", self.token_max_sessions),
                          *((f"tokens.{t.name}.max-sessions", t.max_sessions) for t in self.tokens)]:
            if cap is not None and cap >= self.max_sessions:
                raise ValueError(f"{name} {cap} must be below --max-sessions {self.max_sessions}, so "
                                 "that one token cannot take every session from the others; lower "
                                 "it or raise --max-sessions")
        names = [t.name for t in self.tokens]
        if self.auth_token is not None and "default" in names:
            raise ValueError("[tokens.default] clashes with --auth-token-env, whose token is named "
                             "'default' in logs; rename the table")
        return self

    @property
    def token_sessions(self) -> int:
        """Sessions a token without its own max-sessions may hold: --token-max-sessions, else
        TOKEN_SESSIONS or half of --max-sessions, whichever is less."""
        if self.token_max_sessions is not None:
            return self.token_max_sessions
        return min(TOKEN_SESSIONS, self.max_sessions // 2)

    @property
    def has_databases(self) -> bool:
        """True when at least one source of databases is configured."""
        return bool(self.databases or self.db_dir or self.demo)


def is_loopback(host: str) -> bool:
    """True for localhost and loopback IP literals."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_alias(alias: str, where: str) -> str:
    """Return `alias` if it is a valid database alias, else raise ConfigError naming `where`."""
    if not ALIAS_PATTERN.match(alias):
        raise ConfigError(
            f"{where}: alias {alias!r} is not usable; use letters, digits, '_', '-' or '.' "
            "(at most 64, not starting with '-' or '.')")
    return alias
