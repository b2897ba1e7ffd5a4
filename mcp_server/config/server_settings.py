"""Server settings: the frozen, validated settings object (its parts are in settings_parts.py).

Parsed once at the edge: `command_line.parse_settings` merges the flags, an optional TOML
file and the environment into a ServerSettings.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, SecretStr, field_validator, model_validator

from agent import MAX_SAMPLES, AgentSettings, AskMode, Option, WorkerLimits, with_default

from .settings_parts import AliasFile, DatabaseSpec, HideSpec, TokenSpec

TOKEN_SESSIONS = 32  # HTTP sessions one token may hold by default
MAX_ANSWER_CHARS = 500_000  # the most one answer may weigh: what a tool may declare to Claude Code
REQUEST_STATE_KEY_BYTES = 32  # the least key the SDK's AES-256-GCM sealing of request state takes


class ServerSettings(AgentSettings):
    """Everything the server needs to start; frozen, validated once at the edge.

    The model backend's fields (backend, model, base_urls...) and what the server shares with
    `sqale-agent` (max_rows, samples, prompts...) come from AgentSettings. Each field's
    description is its flag's help and its line in docs/options.md (see agent/options.py).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    databases: Annotated[tuple[DatabaseSpec, ...], Option(name="db", metavar="ALIAS=PATH", repeatable=True)] = (
        Field(
            (),
            description="a database to serve under ALIAS (repeatable; in the config file, the [db] table "
            'of alias = "path" lines)',
        )
    )
    notes: Annotated[tuple[AliasFile, ...], Option(metavar="ALIAS=FILE", repeatable=True)] = Field(
        (),
        description="a UTF-8 file of facts about that database's data, one per line, read with every "
        "question about it (repeatable; in the config file, a [notes] table)",
    )
    hide: Annotated[tuple[HideSpec, ...], Option(metavar="ALIAS=TABLE[.COLUMN]", repeatable=True)] = Field(
        (),
        description="hide a table or column of database ALIAS from the model (repeatable; globs such "
        "as '*.password*' allowed, any case; in the config file, a [hide] table of "
        "alias = [rules] lines)",
    )
    verified: Annotated[tuple[AliasFile, ...], Option(metavar="ALIAS=FILE", repeatable=True)] = Field(
        (),
        description="a verified library for database ALIAS: golden questions (JSON Lines, as `sqale-agent "
        "golden add` writes them) answered at once when asked again, and listed beside the "
        "model's answer when a similar one is asked (repeatable; in the config file, a "
        "[verified] table)",
    )
    verified_writable: bool = Field(
        False,
        description="let the answer view's 'Propose as verified' propose entries for the verified "
        "libraries (none is served until the owner accepts it with `sqale-agent golden "
        "accept`): the stdio client may, and over HTTP each token whose [tokens.NAME] "
        "table says save-verified = true",
    )
    db_dir: Annotated[Path | None, Option(metavar="DIR")] = Field(
        None,
        description="serve every *.sqlite, *.sqlite3 and *.db file in DIR (alias = file stem; bad "
        "files are skipped with a warning)",
    )
    db_dir_outside_links: bool = Field(
        False,
        description="also serve a symlink in --db-dir that points to a file outside DIR (by "
        "default such a link is skipped with a warning)",
    )
    demo: bool = Field(
        False,
        description="also serve a small demo database (alias 'bookshop'), built on "
        "first use in $XDG_CACHE_HOME/sqale-mcp",
    )
    # The default keeps a whole answer (text and structured content) under ~40,000 characters,
    # the 10k tokens past which Claude Code warns (answer/sizing.py); `ask` keeps the episode's.
    max_result_bytes: int = with_default(
        AgentSettings,
        "max_result_bytes",
        16_384,
        also=f"past the default the answer budget grows by as much, up to {MAX_ANSWER_CHARS:,} characters, "
        "and the tool declares it to Claude Code",
    )
    query_timeout: float = Field(
        WorkerLimits.query_timeout, gt=0, le=3_600, description="limit for one SQL statement"
    )
    episode_timeout: float = Field(
        300.0, gt=0, le=86_400, description="limit for answering one question (time queued not counted)"
    )
    call_budget: float = Field(
        50.0,
        ge=0,
        le=86_400,
        description=(
            "seconds a tool call may last: a question not answered by then gets a result with status `working` "
            "(its work goes on; calling again with the same arguments waits for it again); a little under the "
            "60 s after which Claude Desktop gives up; 0: as long as the question takes"
        ),
    )
    one_call_answers: bool = Field(
        False,
        description=(
            "for hosts whose assistant does not call again after `working`: when --call-budget is nearly up, "
            "the samples still exploring answer with what they have (the model's final turn, as when its tool "
            "turns are spent) and the call returns that answer, saying so"
        ),
    )
    working_timeout: float = Field(
        120.0,
        gt=0,
        le=86_400,
        description=(
            "a question whose call said `working` is kept this long after its last call ended; if no call of "
            "the same question comes by then, it is cancelled (or its answer dropped)"
        ),
    )
    token_max_working: int = Field(
        16,
        ge=1,
        le=1_024,
        description=(
            "questions one token may have being answered at once, counting those whose call said `working`; "
            "a new one past that gets a tool error saying to ask one of those again first"
        ),
    )
    max_concurrent: int = Field(
        4,
        ge=1,
        le=64,
        description=("episodes answered at once (a question with K samples takes K); more wait in a queue"),
    )
    max_samples: Annotated[int, Option(metavar="K")] = Field(
        8, ge=1, le=MAX_SAMPLES, description="the most samples a caller may ask for"
    )
    ask_to_choose: AskMode = Field(
        AskMode.DISAGREEMENT,
        description=(
            "when a question ran 2 or more samples and the client can answer a form (MCP elicitation), ask the "
            "person to choose among the distinct results: on disagreement (the results differ), always, or off"
        ),
    )
    ask_samples: Annotated[int, Option(metavar="K")] = Field(
        3,
        ge=1,
        le=MAX_SAMPLES,
        description=(
            "samples a question gets when the caller gives none and the client can answer a form "
            "(--ask-to-choose not off): one sample never disagrees, so it would never ask"
        ),
    )
    ask_timeout: float = Field(
        300.0,
        gt=0,
        le=86_400,
        description=(
            "seconds a person has to choose; after that the answer is the vote's, saying so (a 2025-11-25 "
            "call waits this long; a 2026-07-28 reply sent later gets the vote's answer)"
        ),
    )
    request_state_key_env: Annotated[str | None, Option(metavar="NAME")] = Field(
        None,
        description=(
            f"environment variable holding the key ({REQUEST_STATE_KEY_BYTES}+ bytes) that seals a 2026-07-28 "
            "question awaiting a person's choice; give every server process behind one address the same, so "
            "the reply may reach any of them (default: a key this process makes at start, so a reply must "
            "come back to it)"
        ),
    )
    request_state_key: SecretStr | None = None  # read from the variable named by request_state_key_env
    episode_log: Path | None = Field(
        None,
        description="append one JSON line per answered question (question, database, SQL, status, "
        "trace, timings); its folder is created",
    )
    transport: Literal["stdio", "streamable-http"] = Field("stdio", description="the MCP transport")
    host: str = Field("127.0.0.1", description="HTTP listen address")
    port: int = Field(8000, ge=1, le=65_535, description="HTTP port")
    auth_token_env: Annotated[str | None, Option(metavar="NAME")] = Field(
        None,
        description="environment variable holding the HTTP bearer token (required off loopback "
        "unless [tokens.NAME] tables are set); its token opens every database and is "
        "named 'default' in logs",
    )
    auth_token: SecretStr | None = None  # read from the variable named by auth_token_env
    tokens: Annotated[tuple[TokenSpec, ...], Option(flag=False)] = Field(
        (), description="[tokens.NAME] tables, one per client token of HTTP mode, with the keys below"
    )
    # Quotas count episodes: a question with K samples is K of them.
    token_max_concurrent: int = Field(
        16,
        ge=1,
        le=1_024,
        description=(
            "episodes one token may have running at once (a question with K samples is K); more wait in "
            "its own queue; with several tokens, never more than the server's places (the smaller of "
            "--max-concurrent and the runtime slots) less one, so one is left for the others"
        ),
    )
    token_per_minute: Annotated[int, Option(metavar="M")] = Field(
        600,
        ge=1,
        le=100_000,
        description=(
            "episodes one token may start per minute (a question with K samples counts K, all or none); "
            "more get a tool error saying when to retry"
        ),
    )
    # HTTP sessions: one token may hold fewer than the whole server, so others always find room.
    max_sessions: int = Field(
        1_000, ge=2, le=100_000, description="HTTP sessions open at once over all tokens (more get 503)"
    )
    token_max_sessions: Annotated[
        int | None, Option(default_text=f"{TOKEN_SESSIONS} or half of --max-sessions, whichever is less")
    ] = Field(
        None,
        ge=1,
        le=100_000,
        description="HTTP sessions one token may have open at once; it must stay below --max-sessions, "
        "and more get 429 saying when to retry",
    )
    session_idle_timeout: float = Field(
        600.0,
        gt=0,
        le=86_400,
        description=("an HTTP session without a request for this long is closed (its id then answers 404)"),
    )
    # Slow or silent HTTP clients: each connection's request headers and body must arrive in time.
    http_header_timeout: float = Field(
        10.0,
        gt=0,
        le=600,
        description=(
            "an HTTP connection must send a request's headers within this long of opening or of its last "
            "response, else it is closed"
        ),
    )
    http_body_timeout: float = Field(
        30.0, gt=0, le=3_600, description=("an HTTP request's body must arrive within this long, else 408")
    )
    http_max_connections: int = Field(
        512,
        ge=8,
        le=1_000_000,
        description="HTTP connections open at once; more are closed at once (the "
        "open-file limit is raised to fit when it can be)",
    )
    metrics_token_env: Annotated[str | None, Option(metavar="NAME")] = Field(
        None,
        description="environment variable holding the bearer token of GET /metrics (HTTP mode; "
        "no token, no endpoint)",
    )
    metrics_token: SecretStr | None = None  # GET /metrics needs it; no token: no /metrics
    drain_timeout: float = Field(
        30.0,
        ge=0,
        le=3_600,
        description=(
            "on SIGTERM in HTTP mode, time for questions in flight to finish before the rest are cancelled"
        ),
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description=(
            "stderr log lines as text, or one JSON object per line (time, level, event, logger, "
            "question_id, token) for log shippers"
        ),
    )
    log_level: Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR"], Option(any_case=True)] = Field(
        "INFO", description="stderr log level, any case (DEBUG also logs each model request)"
    )
    max_question_chars: Annotated[int, Option(flag=False)] = Field(
        2_000, ge=10, description="the longest question accepted (longer: a tool error saying the limit)"
    )
    max_evidence_chars: Annotated[int, Option(flag=False)] = Field(
        4_000, ge=0, description="the longest evidence accepted"
    )
    answer_view: bool = Field(
        True,
        description=(
            "offer hosts that render MCP Apps (Claude, VS Code, the Inspector's web UI) a view of each answer: "
            "a sortable table, a chart, the SQL with a copy button (--no-answer-view: no extension, resource "
            "or _meta for anyone)"
        ),
    )

    @field_validator("log_level", mode="before")
    @classmethod
    def _any_case(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _safe_listening(self) -> ServerSettings:
        for name, value in (("--samples", self.samples), ("--ask-samples", self.ask_samples)):
            if value > self.max_samples:
                raise ValueError(
                    f"{name} {value} is above --max-samples {self.max_samples}; lower it or raise --max-samples"
                )
        key = self.request_state_key
        if key is not None and len(key.get_secret_value().encode()) < REQUEST_STATE_KEY_BYTES:
            raise ValueError(
                f"--request-state-key-env {self.request_state_key_env}: it holds "
                f"{len(key.get_secret_value().encode())} bytes; the key needs at least "
                f"{REQUEST_STATE_KEY_BYTES} bytes of randomness, e.g. from: "
                "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
            )
        if (
            self.transport == "streamable-http"
            and self.auth_token is None
            and not self.tokens
            and not is_loopback(self.host)
        ):
            raise ValueError(
                f"refusing to listen on {self.host} without authentication: set --auth-token-env NAME "
                "(the token itself goes in that environment variable), [tokens.NAME] tables in the "
                "--config file, or use --host 127.0.0.1"
            )
        for name, cap in [
            ("--token-max-sessions", self.token_max_sessions),
            *((f"tokens.{t.name}.max-sessions", t.max_sessions) for t in self.tokens),
        ]:
            if cap is not None and cap >= self.max_sessions:
                raise ValueError(
                    f"{name} {cap} must be below --max-sessions {self.max_sessions}, so "
                    "that one token cannot take every session from the others; lower "
                    "it or raise --max-sessions"
                )
        if self.verified_writable and not self.verified:
            raise ValueError(
                "--verified-writable needs a library to write to: add --verified ALIAS=FILE "
                "(or a [verified] table in the config file)"
            )
        granted = [t.name for t in self.tokens if t.save_verified]
        if granted and not self.verified_writable:
            raise ValueError(
                f"tokens.{granted[0]}: save-verified = true needs --verified-writable (or "
                "verified-writable = true in the config file) and a --verified library"
            )
        names = [t.name for t in self.tokens]
        if self.auth_token is not None and "default" in names:
            raise ValueError(
                "[tokens.default] clashes with --auth-token-env, whose token is named "
                "'default' in logs; rename the table"
            )
        return self

    @property
    def token_sessions(self) -> int:
        """Sessions a token without its own max-sessions may hold: --token-max-sessions, else
        TOKEN_SESSIONS or half of --max-sessions, whichever is less."""
        if self.token_max_sessions is not None:
            return self.token_max_sessions
        return min(TOKEN_SESSIONS, self.max_sessions // 2)


def is_loopback(host: str) -> bool:
    """True for localhost and loopback IP literals."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
