"""What a call of answer_sql_question leaves behind: its episode-log line, its log line, its metrics.

Every call that gets past its arguments leaves one episode-log line, one log line and a count
in the metrics, whether it is answered, fails, is refused or is cancelled; refusals write short
lines, and few of them per token and minute. A 2026-07-28 question that asks its person leaves
two lines under one question id: the samples' (status awaiting_choice), then the answer's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent

from agent.episode import Round
from agent.episode_text import clip
from agent.errors import BackendError, SqaleError
from agent.telemetry.gate import question_trace
from agent.verified import verified_tier

from ..serving.access import Caller
from ..state import ServerState
from .output import AnswerOutput, prompt_cache_of, trace_of
from .sampling import QuestionCall
from .tool_errors import CallError, tool_error_for
from .verified import audit_fields

logger = logging.getLogger(__name__)

AWAITING_CHOICE = "awaiting_choice"  # the status of a question whose person was asked to choose
REFUSED_QUESTION_CHARS = 80  # what a refused call's log line keeps of its question
# What the audit line keeps of an answer (not the rows: the SQL and the count say what came back).
AUDITED_ANSWER_FIELDS = frozenset({"status", "sql", "error", "stop_reason", "row_count", "rounds", "tool_calls",
                                   "tokens", "seconds", "trace", "prompt_cache", "chosen_by"})


@dataclass(frozen=True)
class CallLog:
    """Who asked, for the log lines of one question."""

    question_id: str
    token: str

    def log_fields(self) -> dict[str, str]:
        """The `extra` of this question's log records (JSON logs show them)."""
        return {"question_id": self.question_id, "token": self.token}


@dataclass(frozen=True)
class Answered:
    """An answer ready to send, with what its audit line says besides the answer."""

    answer: AnswerOutput
    model_seconds: float = 0.0
    tool_seconds: float = 0.0
    voting: dict[str, Any] = field(default_factory=dict)  # the vote, the person's reply
    meta: dict[str, Any] | None = None  # the result's `_meta` (the answer view's choice), not audited
    calls: int = 1  # the calls the question took (the earlier ones said `working`)


class Refused(CallError):
    """A question refused before it ran (quota, or the server stopping); `reason` labels it."""

    status = "refused"

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message, reason)
        self.reason = reason


class Cancelled(CallError):
    """A question cancelled because the server stopped before it was answered."""

    status = "cancelled"

    def __init__(self, message: str) -> None:
        super().__init__(message, "server_stopped")


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


def activity(played: Sequence[Round], started: float) -> dict[str, Any]:
    """What a question that was not answered had done: its rounds, tool calls, time and trace."""
    trace = trace_of(played)
    return {"rounds": len(played), "tool_calls": len(trace),
            "seconds": round(time.perf_counter() - started, 3),
            "trace": [entry.model_dump(mode="json") for entry in trace],
            "prompt_cache": [entry.model_dump(mode="json") for entry in prompt_cache_of(played)]}


async def record_answered(server_state: ServerState, log: CallLog, call: QuestionCall, hint: str | None,
                          answered: Answered, response: CallToolResult) -> None:
    """The metric, the episode-log line and the log line of an answered call."""
    answer = answered.answer
    # A failed answer's last reply shows what the model did; other lines do not carry the key.
    replied = {} if answer.last_reply is None else {"last_reply": answer.last_reply}
    record = {**answer.model_dump(mode="json", include=set(AUDITED_ANSWER_FIELDS)), **replied,
              "model_seconds": round(answered.model_seconds, 3),
              "tool_seconds": round(answered.tool_seconds, 3),
              "queued_seconds": round(answer.queued_seconds, 3), **answered.voting, **audit_fields(answer),
              **({"calls": answered.calls} if answered.calls > 1 else {}),
              **({"answered_early": answer.answered_early.model_dump(mode="json")} if answer.answered_early
                 else {})}
    server_state.metrics.questions.labels(call.alias, call.caller.name, answer.status, answer.stop_reason).inc()
    tier = None if answer.verified is None else verified_tier(answer.verified.params)  # the library answered it
    question_trace().finish(answer.status, answer.stop_reason, rows=answer.row_count, sql=answer.sql,
                            agreement=answer.agreement, verified_tier=tier)
    await audit(server_state, log, call.question, hint, call.alias, record)
    text_bytes = sum(len(c.text.encode()) for c in response.content if isinstance(c, TextContent))
    if answer.verified is None:  # a verified answer is no episode: it would skew episode times
        server_state.metrics.observe_answer(call.alias, answer.seconds, answer.rounds, text_bytes)
    chose = f"; the person's choice ({answer.asked.reply})" if answer.asked is not None else ""
    logger.info("answered on '%s' for token '%s': %s after %d rounds, %d tool calls, %.1f s "
                "(queued %.1f s)%s%s", call.alias, call.caller.name, answer.status, answer.rounds,
                answer.tool_calls, answer.seconds, answer.queued_seconds,
                f"; {call.samples} samples, agreement {_agreement(answer.agreement)}" if call.samples > 1
                else "", chose, extra=log.log_fields())


async def record_awaiting(server_state: ServerState, log: CallLog, call: QuestionCall, hint: str | None,
                          voting: dict[str, Any]) -> None:
    """The span's end, the episode-log and log lines of a 2026-07-28 question whose answer awaits its
    person's reply (no error: the reply is a call of its own, a trace of its own)."""
    question_trace().finish(AWAITING_CHOICE, "person_asked")
    await audit(server_state, log, call.question, hint, call.alias, {"status": AWAITING_CHOICE, **voting})
    logger.info("asked the person on '%s' for token '%s' to choose among %d answers (%d samples)", call.alias,
                call.caller.name, len(voting.get("candidates", [])), call.samples, extra=log.log_fields())


def _agreement(agreement: float | None) -> str:
    return "none (no SQL ran)" if agreement is None else f"{agreement:.2f}"


async def record_unanswered(server_state: ServerState, log: CallLog, call: QuestionCall, hint: str | None,
                            outcome: tuple[str, str], said: str, done: dict[str, Any],
                            error: BaseException | None = None) -> None:
    """The metric, the span's end, the whole episode-log line and a log line of a failed or cancelled call."""
    server_state.metrics.questions.labels(call.alias, log.token, *outcome).inc()
    traced = question_trace()
    if not traced.ended:  # a question that outlived its call: that call ended its span (`working`)
        traced.finish(*outcome)
    await audit(server_state, log, call.question, hint, call.alias,
                {"status": outcome[0], "stop_reason": outcome[1], "error": said, **done})
    internal = error is not None and not isinstance(error, SqaleError | ToolError)
    # Our bug: an error with its traceback. The runtime failing: a warning, for the operator to
    # act on (the backend leaves it to us, the caller). A cancel, a timeout, a limit: information.
    level = logging.ERROR if internal else logging.WARNING if isinstance(error, BackendError) else logging.INFO
    logger.log(level,
               "not answered on '%s' for token '%s' (%s, %s) after %d rounds, %d tool calls, %.1f s: %s",
               call.alias, log.token, *outcome, done["rounds"], done["tool_calls"], done["seconds"], said,
               exc_info=error if internal else None, extra=log.log_fields())


async def record_refused(server_state: ServerState, log: CallLog, call: QuestionCall, refused: Refused) -> None:
    """The metric and span of a refused call, and (a few per token and minute) a short log line of it."""
    question_trace().finish("refused", refused.reason)
    await record_refusal(server_state, log, call.caller, alias=call.alias, question=call.question,
                         samples=call.samples, refused=refused)


async def record_refusal(server_state: ServerState, log: CallLog, caller: Caller, *, alias: str,
                         question: str, samples: int | None, refused: Refused) -> None:
    """The metric of a refused call and (a few per token and minute) a short log line of it: a question
    refused where it runs (record_refused), or any call refused when it arrives (admission.py)."""
    server_state.metrics.questions.labels(alias, log.token, "refused", refused.reason).inc()
    held_back = server_state.quotas.of(caller).refusal_lines.allow()
    if held_back is None:  # a flood of refusals must not fill the disk: counted, not written
        return
    if server_state.episode_log is not None:
        with anyio.CancelScope(shield=True):
            await server_state.episode_log.append({
                "question_id": log.question_id, "token": log.token, "database": alias,
                "status": "refused", "stop_reason": refused.reason, "error": str(refused),
                "question": clip(question, REFUSED_QUESTION_CHARS), "samples": samples,
                "refusals_not_logged": held_back})
    logger.info("refused on '%s' for token '%s' (%s): %s%s", alias, log.token, refused.reason,
                refused, f" ({held_back} earlier refusals of this token were not logged)" if held_back else "",
                extra=log.log_fields())


async def audit(server_state: ServerState, log: CallLog, question: str, evidence: str | None, alias: str,
                fields: dict[str, Any]) -> None:
    """Append one line to the episode log (when there is one), whatever cancels the call."""
    if server_state.episode_log is not None:
        notes = server_state.catalog.entry(alias).notes
        used = None if notes is None else {"path": str(notes.path), "facts": notes.facts,
                                           "chars": notes.chars}
        hide = server_state.databases[alias].hide
        hidden = {"hide_rules": list(hide.texts)} if hide else {}
        # Shielded: a question cancelled by the server's stop still leaves its whole line.
        with anyio.CancelScope(shield=True):
            await server_state.episode_log.append({
                "question_id": log.question_id, "token": log.token,
                "question": question, "evidence": evidence, "database": alias, "notes": used,
                "model": server_state.model_label, **hidden, **fields})
