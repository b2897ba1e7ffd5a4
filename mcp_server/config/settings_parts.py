"""The settings' parts: a database to serve, an HTTP client token, a notes or verified file, hide rules.

Each is one entry of a repeatable setting of ServerSettings (server_settings.py), frozen and validated.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator


class DatabaseSpec(BaseModel):
    """One database the server answers about: the alias clients use and the file behind it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    alias: str
    path: Path
    skippable: bool = False  # found by --db-dir: a bad file is skipped with a warning


class TokenSpec(BaseModel):
    """One client token of HTTP mode: a `[tokens.NAME]` table of the config file, validated as it
    stands (each field but `name` and `secret` is one of its keys; its description, its line in
    docs/options.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str  # the table's NAME, logged
    env: str = Field(
        description="required: the environment variable holding this token (never the token itself)"
    )
    secret: SecretStr  # read from the variable `env` names, never from a file
    databases: tuple[str, ...] | None = Field(
        None, description="the database aliases this token may use (all when left out)"
    )
    max_concurrent: int | None = Field(
        None,
        ge=1,
        le=1_024,
        description="episodes this token may have running at once (default: --token-max-concurrent)",
    )
    questions_per_minute: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="episodes this token may start per minute (default: --token-per-minute)",
    )
    max_sessions: int | None = Field(
        None,
        ge=1,
        le=100_000,
        description="HTTP sessions this token may have open at once (default: --token-max-sessions)",
    )
    save_verified: bool = Field(
        False,
        strict=True,
        description="true: this token may propose verified answers (with --verified-writable); off by default",
    )

    @field_validator("databases")
    @classmethod
    def _some_databases(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and not value:
            raise ValueError(
                'give a non-empty list of aliases, e.g. databases = ["sales", "chinook"] (leave it out for all)'
            )
        return value


class AliasFile(BaseModel):
    """A file that goes with the database under `alias`: its notes (facts about its data, one per
    line) or its verified library (a golden-question file)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    alias: str
    path: Path


class HideSpec(BaseModel):
    """Tables and columns of one database the model may not see or read."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    alias: str
    rules: tuple[str, ...]
