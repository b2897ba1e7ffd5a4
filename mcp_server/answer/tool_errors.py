"""The errors a call can end with (its arguments checked here: which database, text within its limits),
and the edge where ours become ToolErrors a client (and its user) can act on, each with the kind of
failure its structured result names.

A stdio client started the server itself and owns the machine: it gets the whole message
(paths, URLs, the command that fixes it). A remote (HTTP) client gets the alias, a plain cause
and the question id to quote to the operator; the detail goes to the server's log under that id.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent

from agent import (
    ECHO_CHARS,
    BackendAuthError,
    BackendError,
    BackendTimeout,
    BackendUnreachable,
    DatabaseBusyError,
    DatabasePathError,
    DatabaseWorkerError,
    ModelNotFound,
    SqaleError,
    quoted_text,
    sentence,
)

from .output import TOOL_NAME, unanswered

ERROR_PREFIX = f"Error executing tool {TOOL_NAME}: "  # what the SDK puts before a tool error; ours match


class CallError(ToolError):
    """A ToolError that names its kind of failure, for the structured result of the failed call."""

    status: ClassVar[Literal["error", "refused", "cancelled"]] = "error"  # the result's status

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind  # the result's stop_reason, e.g. invalid_arguments or backend_unreachable


class Refused(CallError):
    """A question refused before it ran (quota, too many at once, the server stopping); `reason` labels it."""

    status = "refused"

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message, reason)
        self.reason = reason


class Cancelled(CallError):
    """A question cancelled because the server stopped before it was answered."""

    status = "cancelled"

    def __init__(self, message: str) -> None:
        super().__init__(message, "server_stopped")


# Each of our errors, the first that fits: the kind of failure the failed call's structured result
# names; the prefix a stdio client reads before the error's own message (which says what to do
# next); and for remote clients what failed, in plain words, and who can fix it (never a path or a URL).
_FAILURES: tuple[tuple[type[SqaleError], str, str, str], ...] = (
    (
        BackendUnreachable,
        "backend_unreachable",
        "The model runtime is unreachable",
        "The model runtime is unreachable, so no question can be answered now.",
    ),
    (
        ModelNotFound,
        "model_not_found",
        "The model is not installed",
        "The model is not installed on the model runtime.",
    ),
    (BackendTimeout, "backend_timeout", "The model runtime timed out", "The model runtime timed out."),
    (
        BackendAuthError,
        "backend_auth",
        "The model runtime refused our credentials",
        "The model runtime refused the server's credentials.",
    ),
    (BackendError, "backend_error", "The model runtime failed", "The model runtime failed."),
    (
        DatabaseBusyError,
        "database_busy",
        "The database is busy",
        "The database '{database}' is busy: another program is writing to it, and it stayed locked while the "
        "server waited.",
    ),
    (
        DatabasePathError,
        "database_unreadable",
        "The database cannot be read",
        "The database '{database}' cannot be read: its file is missing, unreadable or not an SQLite database.",
    ),
    (
        DatabaseWorkerError,
        "worker_failed",
        "The SQLite worker failed",
        "The SQLite worker failed on the database '{database}'.",
    ),
)
INVALID_ARGUMENTS = "invalid_arguments"


def failure_kind(exc: SqaleError) -> str:
    """The kind of failure one of our errors is (`answer_failed` for any other)."""
    return next((kind for cls, kind, _, _ in _FAILURES if isinstance(exc, cls)), "answer_failed")


def edge_error(exc: BaseException, *, database: str, remote: bool, question_id: str) -> ToolError | None:
    """The ToolError the client gets for `exc`, raised while answering about `database`.

    Our ToolErrors pass as they are (their texts hold nothing of the server's), our other errors
    are mapped by tool_error_for, and anything else is our own bug: None for a stdio client (it
    propagates with its traceback), a plain "internal error" with the question id for a remote one.
    """
    if isinstance(exc, ToolError):
        return exc
    if isinstance(exc, SqaleError):
        return tool_error_for(exc, database=database, remote=remote, question_id=question_id)
    if not remote:
        return None
    return CallError(
        "Answering failed because of an error inside the server. Ask the server's "
        f"operator: its log has the details under question id {question_id}.",
        "internal_error",
    )


def tool_error_for(exc: SqaleError, *, database: str, remote: bool = False, question_id: str = "") -> CallError:
    """The ToolError for one of our errors raised while answering about `database`."""
    found = next(
        ((cls, kind, prefix, cause) for cls, kind, prefix, cause in _FAILURES if isinstance(exc, cls)), None
    )
    if remote:
        cause = found[3] if found else "Answering on the database '{database}' failed."
        passing = isinstance(exc, BackendTimeout | DatabaseBusyError)  # a retry may well work
        retry = "Retry in a moment; if it keeps failing, ask" if passing else "Ask"
        return CallError(
            f"{cause.format(database=database)} {retry} the server's operator: its "
            f"log has the details under question id {question_id}.",
            failure_kind(exc),
        )
    if found is None:
        return CallError(f"Answering failed: {exc}", "answer_failed")
    cls, kind, prefix, _ = found
    if cls is DatabaseBusyError:  # it says to try again: nothing to fix
        return CallError(f"{prefix} ('{database}'): {sentence(str(exc))}", kind)
    if cls in (DatabasePathError, DatabaseWorkerError):
        return CallError(
            f"{prefix} ('{database}'): {sentence(str(exc))} Ask the server's "
            "operator to check the database file, then retry.",
            kind,
        )
    return CallError(f"{prefix}: {exc}", kind)


def failure_outcome(failure: ToolError | None, cause: BaseException) -> tuple[str, str]:
    """(status, reason) of a call that was not answered, for the metrics and the episode log."""
    if isinstance(failure, Cancelled):
        return "cancelled", "server_stopping"
    if isinstance(cause, ToolError):  # ours, with no cause: the episode timeout
        return "error", type(cause.__cause__).__name__ if cause.__cause__ is not None else "episode_timeout"
    return "error", type(cause).__name__


def detail(exc: BaseException, alias: str) -> str:
    """The full text of an error, as a stdio client reads it, for the server's own logs."""
    if isinstance(exc, SqaleError):
        return str(tool_error_for(exc, database=alias))
    return str(exc) if isinstance(exc, ToolError) else repr(exc)


def failed_result(error: CallError, *, database: str | None, question: str, model: str) -> CallToolResult:
    """The isError result of a call of answer_sql_question that was not answered, with its structured
    content (its text as the SDK words a tool error)."""
    answer = unanswered(
        str(error), status=error.status, kind=error.kind, database=database, question=question, model=model
    )
    return CallToolResult(
        content=[TextContent(type="text", text=f"{ERROR_PREFIX}{error}")],
        structured_content=answer.model_dump(mode="json"),
        is_error=True,
    )


def known_alias(given: str | None, aliases: Sequence[str]) -> str | None:
    """The alias `given` names, or None when it names none of `aliases`."""
    try:
        return resolve_alias(given, aliases)
    except CallError:
        return None


def resolve_alias(given: str | None, aliases: Sequence[str]) -> str:
    """The configured alias `given` names (exact, else the only case-insensitive match)."""
    if given is None or not given.strip():
        if len(aliases) == 1:
            return aliases[0]
        raise unknown_database(None, aliases)
    name = given.strip()
    if name in aliases:
        return name
    folded = [a for a in aliases if a.casefold() == name.casefold()]
    if len(folded) == 1:
        return folded[0]
    raise unknown_database(name, aliases)


def checked_text(name: str, value: str | None, limit: int) -> str | None:
    """`value` stripped, None when empty; ToolError when longer than `limit`."""
    text = (value or "").strip()
    if len(text) > limit:
        raise text_too_long(name, len(text), limit)
    return text or None


def unknown_database(given: str | None, aliases: Sequence[str]) -> CallError:
    """No database chosen, or an alias that is not configured."""
    listed = ", ".join(aliases)
    if given is None:
        return CallError(
            f"Several databases are configured; pass one as `database`: {listed}.", "unknown_database"
        )
    shown = quoted_text(given, ECHO_CHARS, quote="'")  # the client's own text, on one line
    return CallError(
        f"Unknown database {shown}; pass one of the configured aliases as `database`: {listed}.",
        "unknown_database",
    )


def empty_question() -> CallError:
    """The question is empty or only whitespace."""
    return CallError(
        "The question is empty; ask a question about the data in plain language, "
        "e.g. 'Which 5 customers spent the most?'.",
        INVALID_ARGUMENTS,
    )


def text_too_long(name: str, length: int, limit: int) -> CallError:
    """`question` or `evidence` exceeds its limit."""
    advice = (
        "Shorten it to one precise question; put background hints in `evidence`."
        if name == "question"
        else "Keep only the hints the question needs."
    )
    return CallError(
        f"The {name} is {length:,} characters long; the limit is {limit:,}. {advice}", INVALID_ARGUMENTS
    )


# What each argument of answer_sql_question accepts, said when a call sends something else.
ARGUMENTS_ACCEPTED = {
    "question": "text: the question in plain language",
    "database": "text: the alias of a configured database (listed in the tool description), or null",
    "evidence": "text: hints about the data, or null",
    "samples": "a whole number from 1 to {max_samples}, or null for the server's default",
    "verified": "true or false, or null",
}


def wrong_arguments(wrong: Sequence[tuple[str, object]], missing: Sequence[str], max_samples: int) -> CallError:
    """Arguments of the wrong type (name, value given) or missing, in one line: what each accepts.

    Only the JSON kind of a value is named, never the value: it may be anything the client sent.
    """

    def accepts(name: str) -> str:
        return ARGUMENTS_ACCEPTED[name].format(max_samples=max_samples)

    said = [f"`{name}` is missing; pass {accepts(name)}" for name in missing]
    said += [f"`{name}` must be {accepts(name)}, not {_json_kind(value)}" for name, value in wrong]
    if not said:  # the SDK refused what each argument accepts on its own: name them all
        said = [
            "the arguments do not match the tool's input schema: "
            + "; ".join(f"`{name}` takes {accepts(name)}" for name in ARGUMENTS_ACCEPTED)
        ]
    return CallError(sentence("; ".join(said)), INVALID_ARGUMENTS)


def _json_kind(value: object) -> str:
    """What kind of JSON value `value` is, in words (`a list`, `text`, `null`)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, float) and not value.is_integer():
        return "a number with a fraction"
    kinds = ((str, "text"), (int, "a number"), (float, "a number"), (list, "a list"), (dict, "an object"))
    return next((kind for cls, kind in kinds if isinstance(value, cls)), "another kind of value")


def samples_out_of_range(given: int, limit: int) -> CallError:
    """`samples` below 1 or above --max-samples."""
    return CallError(
        f"`samples` is {given}; give a number from 1 to {limit} (the server's "
        "--max-samples), or leave it out for the server's default.",
        INVALID_ARGUMENTS,
    )


def episode_timeout(seconds: float) -> CallError:
    """The whole episode ran past --episode-timeout."""
    return CallError(
        f"Answering took longer than the {seconds:g} s limit and was stopped. Retry, ask a "
        "narrower question, or ask the server's operator to raise --episode-timeout (a slow "
        "machine or a model still loading can cause this).",
        "episode_timeout",
    )


def server_stopping() -> Refused:
    """A question that arrived while the server drains before it stops."""
    return Refused(
        "The server is shutting down and takes no new questions. Ask again in a "
        "minute, once it has restarted (or ask its operator).",
        "stopping",
    )


def server_stopped_answering() -> Cancelled:
    """A question still running when the drain time ran out."""
    return Cancelled(
        "The server shut down before this question was answered (it ran past the "
        "server's drain time). Ask again once the server has restarted."
    )


def stale_reply() -> CallError:
    """A 2026-07-28 retry whose state this server cannot resume (another version minted it, or the
    token no longer sees its database)."""
    return CallError(
        "This reply belongs to a question this server cannot resume (it was asked of another "
        "version of the server, or about a database this token no longer sees). Ask the "
        "question again.",
        "stale_reply",
    )


def too_many_working(token: str, limit: int) -> Refused:
    """The refusal of a new question while the token has its most being answered (--token-max-working)."""
    return Refused(
        f"Too many questions at once: token '{token}' already has {limit} being answered, counting "
        "those whose call said `working`. Call again with the arguments of one of those to get its "
        "answer (that also frees its place), or wait for them to be answered, then ask this one.",
        "working",
    )
