"""`save_verified_answer`: the answer view's "Save as verified", an app-only tool.

Only hosts that negotiated MCP Apps list it, and only when --verified-writable is set (the
model never sees it: visibility `app`). It checks the SQL as loading a library does (guarded
worker, hide rules, nothing hidden read, no contradiction with an entry already there) and
appends the entry with who saved it (the token's name, or the user running a stdio server)
and when. A token saves only to the libraries of the databases it may use.
"""

from __future__ import annotations

import getpass
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, cast

import anyio
from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, TextContent
from pydantic import Field

from agent.verified.saving import Saved, save_entry

from ..config.settings import ServerSettings
from ..runtime import ServerRuntime
from ..serving.access import Caller, caller_of
from .tool import checked_text, resolve_alias
from .tool_errors import CallError

SAVE_TOOL_NAME = "save_verified_answer"
SAVE_TOOL_TITLE = "Save as verified"
SAVE_TOOL_DESCRIPTION = (
    "Save a question and its SQL to the database's verified library, so the next time the same "
    "question is asked it is answered at once with this SQL. Called by the answer view's 'Save as "
    "verified' button after the user confirmed it.")


async def save_verified_answer(
    database: Annotated[str, Field(description="alias of the database the answer is about")],
    question: Annotated[str, Field(description="the question, as it was asked")],
    sql: Annotated[str, Field(description="the SQL the user checked and wants to keep")],
    ctx: Context,
    evidence: Annotated[str | None, Field(description="the evidence the question was asked with")] = None,
) -> CallToolResult:
    """Append a checked question and SQL to the database's verified library."""
    runtime = cast(ServerRuntime, ctx.request_context.lifespan_context)
    return await save_answer(runtime, caller_of(ctx.request_context.request), database=database,
                             question=question, sql=sql, evidence=evidence)


async def save_answer(runtime: ServerRuntime, caller: Caller, *, database: str, question: str, sql: str,
                      evidence: str | None) -> CallToolResult:
    """The save and its outcome as a tool result (isError when nothing was saved)."""
    settings = runtime.settings
    try:
        alias = resolve_alias(database, caller.visible(runtime.catalog.aliases))
        asked = checked_text("question", question, settings.max_question_chars)
        hint = checked_text("evidence", evidence, settings.max_evidence_chars)
    except CallError as error:
        return _result(str(error), failed=True)
    library = runtime.verified.get(alias)
    if library is None or not settings.verified_writable:
        return _result(f"Not saved: '{alias}' has no writable verified library (the server's operator "
                       "sets one with --verified ALIAS=FILE and --verified-writable).", failed=True)
    saved: Saved = await anyio.to_thread.run_sync(lambda: save_entry(
        library, runtime.databases[alias], question=asked or "", sql=sql, evidence=hint,
        added_by=saver(caller)))
    return _result(saved.message, failed=not saved.added)


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


def app_only_tools(settings: ServerSettings) -> tuple[AppOnlyTool, ...]:
    """The app-only tools these settings enable: "Save as verified" with --verified-writable."""
    if not (settings.verified_writable and settings.verified):
        return ()
    return (AppOnlyTool(save_verified_answer, SAVE_TOOL_NAME, SAVE_TOOL_TITLE, SAVE_TOOL_DESCRIPTION),)
