"""Who is asking: bearer tokens with names and database scopes, checked in constant time."""

from __future__ import annotations

import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agent.errors import ConfigError

from ..config.settings import ServerSettings

CALLER_SCOPE_KEY = "sqale.caller"  # where the HTTP layer leaves the Caller in the ASGI scope
DEFAULT_TOKEN_NAME = "default"  # the --auth-token-env token, in logs and metrics
LOCAL_CALLER_NAME = "local"  # stdio, or HTTP on loopback without tokens


@dataclass(frozen=True)
class Caller:
    """An authenticated client: the token's name (never its value) and the aliases it may use."""

    name: str
    databases: tuple[str, ...] | None = None  # None: every configured database
    # Reached us over HTTP (loopback included): its errors name no server path, URL or exception;
    # a stdio client started the server itself and owns the machine, so it gets the detail.
    remote: bool = False

    def visible(self, aliases: Sequence[str]) -> tuple[str, ...]:
        """The configured `aliases` this caller may see, in their configured order."""
        if self.databases is None:
            return tuple(aliases)
        return tuple(a for a in aliases if a in self.databases)


LOCAL_CALLER = Caller(LOCAL_CALLER_NAME)


@dataclass(frozen=True)
class _Credential:
    secret: bytes
    caller: Caller


class TokenTable:
    """Every accepted token; `find` compares a presented token with all of them in constant time."""

    def __init__(self, credentials: Sequence[_Credential]) -> None:
        self._credentials = tuple(credentials)

    @property
    def enabled(self) -> bool:
        """True when HTTP requests must carry a token."""
        return bool(self._credentials)

    @property
    def callers(self) -> tuple[Caller, ...]:
        """Every token's caller, for quotas and metrics."""
        return tuple(c.caller for c in self._credentials)

    def find(self, presented: bytes) -> Caller | None:
        """The caller whose token is `presented`, or None."""
        found: Caller | None = None
        # Compare with every token, without stopping early: the time taken tells nothing about
        # which token (or how much of one) was guessed right.
        for credential in self._credentials:
            if hmac.compare_digest(presented, credential.secret):
                found = credential.caller
        return found


def token_table(settings: ServerSettings, aliases: Sequence[str]) -> TokenTable:
    """The tokens of the settings; ConfigError for an unknown alias in a scope or a shared secret."""
    credentials: list[_Credential] = []
    if settings.auth_token is not None:
        credentials.append(_Credential(settings.auth_token.get_secret_value().encode(),
                                       Caller(DEFAULT_TOKEN_NAME)))
    for spec in settings.tokens:
        if spec.databases is not None:
            for alias in spec.databases:
                if alias not in aliases:
                    raise ConfigError(
                        f"tokens.{spec.name}: database {alias!r} is not configured; configured: "
                        f"{', '.join(aliases)}")
        credentials.append(_Credential(spec.secret.get_secret_value().encode(),
                                       Caller(spec.name, spec.databases)))
    secrets = [c.secret for c in credentials]
    if len(set(secrets)) != len(secrets):
        raise ConfigError("two tokens have the same value; give every token its own secret so the "
                          "logs and scopes can tell the clients apart")
    return TokenTable(credentials)


def caller_of(request: Any) -> Caller:
    """The Caller of `request`: the one the HTTP layer attached to a Starlette request (or the
    local caller on loopback without tokens), marked remote; the local caller on stdio."""
    scope: Mapping[str, Any] | None = getattr(request, "scope", None)
    if scope is None:
        return LOCAL_CALLER
    caller = scope.get(CALLER_SCOPE_KEY)
    return replace(caller if isinstance(caller, Caller) else LOCAL_CALLER, remote=True)
