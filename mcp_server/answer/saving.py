"""`save_verified_answer`: the answer view's "Propose as verified", an app-only tool.

Saving is a permission, not a listing: with --verified-writable the stdio client may save, and
over HTTP only a token whose [tokens.NAME] table says `save-verified = true` (never the
--auth-token-env token, nor a loopback server without tokens). Only hosts that negotiated MCP
Apps list the tool, and only to callers that may save; but declaring the extension is one JSON
field, so the permission is checked here, on every call. A token saves only for the databases
it may use.

What is saved is a proposal (agent.verified.saving): checked under the hide rules, appended to
the library's proposals file with who proposed it and when, and never served to anyone until
the library's owner accepts it (`sqale-agent golden accept`). Every call counts as one episode
against the token's per-minute quota, and leaves a log line (token, question, a hash of the
SQL, the outcome) and a count in `sqale_verified_saves_total`; calls refused by the quota
write a few lines per token and minute, as refused questions do.
"""

from __future__ import annotations

import getpass
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, TextContent
from pydantic import Field

from agent.episode_text import clip
from agent.errors import SqaleError
from agent.verified.proposals import sql_digest
from agent.verified.saving import Saved, propose_entry

from ..config.server_settings import ServerSettings
from ..opening import ready_state
from ..serving.access import Caller, caller_of
from ..serving.quotas import QuotaExceeded
from ..state import ServerState
from .arguments import checked_text, resolve_alias
from .tool_errors import CallError, edge_error

logger = logging.getLogger(__name__)

SAVE_TOOL_NAME = "save_verified_answer"
SAVE_TOOL_TITLE = "Propose as verified"
SAVE_TOOL_DESCRIPTION = (
    "Propose a question and its SQL for the database's verified library. The library's owner reviews "
    "each proposal; once they accept it, the same question is answered at once with this SQL. Called by "
    "the answer view's 'Propose as verified' button after the user confirmed it.")
LOGGED_QUESTION_CHARS = 80  # what a save's log line keeps of its question
LOGGED_DIGEST_CHARS = 16  # of the SQL's SHA-256


async def save_verified_answer(
    database: Annotated[str, Field(description="alias of the database the answer is about")],
    question: Annotated[str, Field(description="the question, as it was asked")],
    sql: Annotated[str, Field(description="the SQL the user checked and wants to keep")],
    ctx: Context,
    evidence: Annotated[str | None, Field(description="the evidence the question was asked with")] = None,
) -> CallToolResult:
    """Propose a checked question and SQL for the database's verified library."""
    server_state = await ready_state(ctx.request_context.lifespan_context)
    return await save_answer(server_state, caller_of(ctx.request_context.request), database=database,
                             question=question, sql=sql, evidence=evidence)


def may_save(settings: ServerSettings, caller: Caller) -> bool:
    """True when `caller` may propose verified answers (see the module docstring)."""
    if not settings.verified_writable:
        return False
    if not caller.remote:
        return True
    spec = next((t for t in settings.tokens if t.name == caller.name), None)
    return spec is not None and spec.save_verified


async def save_answer(server_state: ServerState, caller: Caller, *, database: str, question: str, sql: str,
                      evidence: str | None) -> CallToolResult:
    """The save and its outcome as a tool result (isError when nothing holds the SQL now)."""
    settings = server_state.settings
    attempt = _Attempt(caller, question, sql)
    try:
        server_state.quotas.check_rate(caller)
    except QuotaExceeded as exc:
        return attempt.ended(server_state, None, "quota", f"Not saved: {exc}", failed=True)
    if not may_save(settings, caller):
        return attempt.ended(server_state, None, "not_permitted", (
            f"Not saved: token '{caller.name}' may not propose verified answers. The server's operator "
            "grants it with save-verified = true in its [tokens.NAME] table."), failed=True)
    try:
        alias = resolve_alias(database, caller.visible(server_state.catalog.aliases))
        asked = checked_text("question", question, settings.max_question_chars)
        hint = checked_text("evidence", evidence, settings.max_evidence_chars)
    except CallError as error:
        return attempt.ended(server_state, None, "invalid", str(error), failed=True)
    library = server_state.verified.get(alias)
    if library is None:
        return attempt.ended(server_state, alias, "no_library", (
            f"Not saved: '{alias}' has no verified library (the server's operator sets one with "
            "--verified ALIAS=FILE)."), failed=True)
    try:
        saved: Saved = await anyio.to_thread.run_sync(lambda: propose_entry(
            library, server_state.databases[alias], question=asked or "", sql=sql, evidence=hint,
            proposed_by=saver(caller)))
    except Exception as exc:
        # The database or its worker failed (or a bug of ours): mapped as for a question, so a
        # remote client reads no server path; the log line has the detail under this id.
        ident = uuid.uuid4().hex[:12]
        failure = edge_error(exc, database=alias, remote=caller.remote, question_id=ident)
        logger.log(logging.WARNING if isinstance(exc, SqaleError) else logging.ERROR,
                   "save on '%s' for token '%s' failed (id %s): %r", alias, caller.name, ident, exc,
                   exc_info=not isinstance(exc, SqaleError), extra={"token": caller.name})
        result = attempt.ended(server_state, alias, "error", f"Not saved: {failure or 'a bug of ours'}",
                               failed=True)
        if failure is None:  # our own bug, on stdio: it propagates as it is
            raise
        return result
    return attempt.ended(server_state, alias, saved.outcome.value, saved.message, failed=saved.failed)


@dataclass(frozen=True)
class _Attempt:
    """One call of the save tool, for its log line and metric."""

    caller: Caller
    question: str
    sql: str

    def ended(self, server_state: ServerState, alias: str | None, outcome: str, message: str, *,
              failed: bool) -> CallToolResult:
        """Count and log the call's outcome, and return it as the tool result."""
        server_state.metrics.saves.labels(alias or "", self.caller.name, outcome).inc()
        if outcome == "quota" and server_state.quotas.of(self.caller).refusal_lines.allow() is None:
            return _result(message, failed=failed)  # a flood must not fill the disk: counted only
        logger.info("save on '%s' for token '%s': %s (question %r, sql sha256 %s…, %d characters): %s",
                    alias or "-", self.caller.name, outcome, clip(self.question, LOGGED_QUESTION_CHARS),
                    sql_digest(self.sql.strip())[:LOGGED_DIGEST_CHARS], len(self.sql), message,
                    extra={"token": self.caller.name})
        return _result(message, failed=failed)


def saver(caller: Caller) -> str:
    """Who saves: the token's name, or for the local caller the user running the server."""
    if caller.remote:
        return caller.name
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no user name in the environment or the password database
        return caller.name


def _result(message: str, *, failed: bool) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=failed)


@dataclass(frozen=True)
class AppOnlyTool:
    """A tool only the answer view may call (MCP Apps visibility `app`), as the view registers it."""

    fn: Callable[..., Any]
    name: str
    title: str
    description: str
    offered: Callable[[Caller], bool]  # who is shown it (the tool itself checks who may call it)


def app_only_tools(settings: ServerSettings) -> tuple[AppOnlyTool, ...]:
    """The app-only tools these settings enable: "Propose as verified" with --verified-writable."""
    if not (settings.verified_writable and settings.verified):
        return ()
    with_library = [spec.alias for spec in settings.verified]

    def offered(caller: Caller) -> bool:  # it may save, and one of its databases has a library
        return may_save(settings, caller) and bool(caller.visible(with_library))

    return (AppOnlyTool(save_verified_answer, SAVE_TOOL_NAME, SAVE_TOOL_TITLE, SAVE_TOOL_DESCRIPTION,
                        offered),)
