"""Who is asking: bearer tokens with names and database scopes, checked in constant time.

The token table is the SDK's `TokenVerifier`: the SDK's bearer backend (`BearerAuthBackend`, under
Starlette's `AuthenticationMiddleware`) reads the header and leaves an `AuthenticatedUser` in the
scope, and the SDK binds each session to that user's client id, our token's name.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken

from agent import ConfigError, nearest

from ..config.server_settings import ServerSettings
from .headers import can_be_sent

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


class CallerToken(AccessToken):
    """The SDK's AccessToken for one of our tokens, with its Caller. `token` and `client_id` hold
    the token's name, never its value: logs and reprs of the scope's user show no secret."""

    caller: Caller


@dataclass(frozen=True)
class _Credential:
    secret: bytes
    caller: Caller


class TokenTable:
    """Every accepted token; `find` compares a presented token with all of them in constant time.

    A `TokenVerifier` (mcp.server.auth.provider) for the SDK's bearer backend.
    """

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

    async def verify_token(self, token: str) -> CallerToken | None:
        """The SDK's view of `token` (as its bearer backend decoded it: latin-1), or None."""
        try:
            presented = token.encode("latin-1")
        except UnicodeEncodeError:  # not from a header
            return None
        caller = self.find(presented)
        if caller is None:
            return None
        return CallerToken(token=caller.name, client_id=caller.name, scopes=[], caller=caller)


def token_table(settings: ServerSettings, aliases: Sequence[str]) -> TokenTable:
    """The tokens of the settings; ConfigError for an unknown alias in a scope, a shared secret or
    a token no client could send (the metrics token's included)."""
    credentials: list[_Credential] = []
    if settings.auth_token is not None:
        credentials.append(
            _Credential(settings.auth_token.get_secret_value().encode(), Caller(DEFAULT_TOKEN_NAME))
        )
    for spec in settings.tokens:
        if spec.databases is not None:
            for alias in spec.databases:
                if alias not in aliases:
                    near = nearest(alias, aliases)
                    raise ConfigError(
                        f"tokens.{spec.name}: database {alias!r} is not configured; "
                        + (f"did you mean {near!r}?" if near else f"configured: {', '.join(aliases)}")
                    )
        credentials.append(
            _Credential(spec.secret.get_secret_value().encode(), Caller(spec.name, spec.databases))
        )
    unsendable = [c.caller.name for c in credentials if not can_be_sent(c.secret.decode())]
    if settings.metrics_token is not None and not can_be_sent(settings.metrics_token.get_secret_value()):
        unsendable.append("the metrics token")
    if unsendable:
        raise ConfigError(
            f"{', '.join(unsendable)}: a token may not contain ',' (the server reads a comma in "
            "an Authorization header as two tokens joined); give it a value without one, e.g. "
            "from: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    secrets = [c.secret for c in credentials]
    if len(set(secrets)) != len(secrets):
        raise ConfigError(
            "two tokens have the same value; give every token its own secret so the "
            "logs and scopes can tell the clients apart"
        )
    return TokenTable(credentials)


def may_save(settings: ServerSettings, caller: Caller) -> bool:
    """True when `caller` may propose verified answers: with --verified-writable, the stdio client;
    over HTTP only a token whose [tokens.NAME] table says `save-verified = true` (answer/verified.py)."""
    if not settings.verified_writable:
        return False
    if not caller.remote:
        return True
    spec = next((t for t in settings.tokens if t.name == caller.name), None)
    return spec is not None and spec.save_verified


def scope_caller(scope: Mapping[str, Any]) -> Caller:
    """The Caller the SDK's bearer backend authenticated for an ASGI scope, or the local caller
    (HTTP on loopback without tokens)."""
    user = scope.get("user")
    if isinstance(user, AuthenticatedUser) and isinstance(user.access_token, CallerToken):
        return user.access_token.caller
    return LOCAL_CALLER


def caller_of(request: Any) -> Caller:
    """The Caller of `request`: its token's over HTTP (or the local caller on loopback without
    tokens), marked remote; the local caller on stdio."""
    scope: Mapping[str, Any] | None = getattr(request, "scope", None)
    if scope is None:
        return LOCAL_CALLER
    return replace(scope_caller(scope), remote=True)
