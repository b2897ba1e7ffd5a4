"""A call and what it leaves behind: the `Call` (who asks, what, the id its lines go under), and its
episode-log line, its log line, its metrics and the end of its span (`Records`).

Every call that gets past its arguments leaves one episode-log line, one log line and a count
in the metrics, whether it is answered, fails, is refused or is cancelled; refusals write short
lines, and few of them per token and minute. A 2026-07-28 question that asks its person leaves
two lines under one question id: the samples' (status awaiting_choice), then the answer's.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, InputRequiredResult, TextContent

from agent import FACT_SEPARATOR, BackendError, Database, Round, SqaleError, clip, question_trace, verified_tier

from ..config.catalog import Catalog
from ..serving.access import Caller
from ..serving.metrics import ServerMetrics
from ..serving.quotas import TokenQuotas
from ..state import EpisodeLog
from .output import AWAITING_CHOICE, WORKING, AnswerOutput
from .samples import prompt_cache_of, trace_of
from .tool_errors import Refused

logger = logging.getLogger(__name__)

REFUSED_QUESTION_CHARS = 80  # what a refused call's log line keeps of its question
# What the audit line keeps of an answer (not the rows: the SQL and the count say what came back).
AUDITED_ANSWER_FIELDS = frozenset(
    {
        "status",
        "sql",
        "error",
        "stop_reason",
        "row_count",
        "rounds",
        "tool_calls",
        "tokens",
        "seconds",
        "trace",
        "prompt_cache",
        "chosen_by",
    }
)
# How a cancelled question's line reads, by why it was cancelled (ongoing.Ongoing.cancelled_why).
CANCELLED = {
    "call_cancelled": (("cancelled", "call_cancelled"), "the call was cancelled before it was answered"),
    "not_asked_again": (
        ("expired", "not_asked_again"),
        "its call said working and no call of the same "
        "question came back within --working-timeout, so it was stopped",
    ),
    "server_stopped": (("cancelled", "server_stopped"), "the server stopped before it was answered"),
}


def new_question_id() -> str:
    """A question's id: its lines carry it, and a remote client's error quotes it to the operator."""
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class Call:
    """A checked call of a question: who asks, what, and the id its lines are logged under."""

    caller: Caller  # whose quota each sample's episode counts against
    question: str
    alias: str
    samples: int
    given_evidence: str | None = None  # the caller's own evidence (a verified answer must fit it)
    notes: str | None = None  # the database's notes, as the evidence starts with them
    use_verified: bool = True  # False: the caller asked for the model's answer (`verified: false`)
    # Every sample runs to the end (no early stop): the person may be asked to choose among all
    # their results, and a minority's may be the right one.
    run_all: bool = False
    hints: str | None = None  # the similar verified answers, given as evidence (--verified-hints)
    question_id: str = field(default_factory=new_question_id)

    @property
    def evidence(self) -> str | None:
        """The evidence as the model reads it: the notes, the hints, then the caller's own."""
        parts = (self.notes, self.hints, self.given_evidence)
        return FACT_SEPARATOR.join(part for part in parts if part) or None

    def log_fields(self) -> dict[str, str]:
        """The `extra` of this question's log records (JSON logs show them)."""
        return {"question_id": self.question_id, "token": self.caller.name}


@dataclass(frozen=True)
class Answered:
    """An answer ready to send, with what its audit line says besides the answer."""

    answer: AnswerOutput
    model_seconds: float = 0.0
    tool_seconds: float = 0.0
    voting: dict[str, Any] = field(default_factory=dict)  # the vote, the person's reply
    meta: dict[str, Any] | None = None  # the result's `_meta` (the answer view's choice), not audited
    calls: int = 1  # the calls the question took (the earlier ones said `working`)


@dataclass(frozen=True)
class Awaiting:
    """A 2026-07-28 question whose answer waits for its person: the form to send, the vote to log."""

    result: InputRequiredResult
    voting: dict[str, Any]


def activity(played: Sequence[Round], started: float) -> dict[str, Any]:
    """What a question that was not answered had done: its rounds, tool calls, time and trace."""
    trace = trace_of(played)
    return {
        "rounds": len(played),
        "tool_calls": len(trace),
        "seconds": round(time.perf_counter() - started, 3),
        "trace": [entry.model_dump(mode="json") for entry in trace],
        "prompt_cache": [entry.model_dump(mode="json") for entry in prompt_cache_of(played)],
    }


class Records:
    """Where calls leave their lines and counts: the episode log, the server's log, the metrics and the
    question's span; each line names the database's notes and hide rules, and the model."""

    def __init__(
        self,
        *,
        episode_log: EpisodeLog | None,
        metrics: ServerMetrics,
        quotas: TokenQuotas,
        catalog: Catalog,
        databases: Mapping[str, Database],
        model_label: str,
    ) -> None:
        self.episode_log, self.metrics, self.quotas = episode_log, metrics, quotas
        self.catalog, self.databases, self.model_label = catalog, databases, model_label

    def describe(self, call: Call) -> None:
        """Name the call's question, database and token on its span."""
        question_trace().describe(
            database=call.alias,
            samples=call.samples,
            token=call.caller.name,
            question=call.question,
            evidence=call.given_evidence,
            hidden_names=self.databases[call.alias].all_hidden_names,
        )

    async def answered(self, call: Call, answered: Answered, response: CallToolResult) -> None:
        """The metric, the episode-log line and the log line of an answered call."""
        answer = answered.answer
        # A failed answer's last reply shows what the model did; other lines do not carry the key.
        replied = {} if answer.last_reply is None else {"last_reply": answer.last_reply}
        record = {
            **answer.model_dump(mode="json", include=set(AUDITED_ANSWER_FIELDS)),
            **replied,
            "model_seconds": round(answered.model_seconds, 3),
            "tool_seconds": round(answered.tool_seconds, 3),
            "queued_seconds": round(answer.queued_seconds, 3),
            **answered.voting,
            **_library_fields(answer),
            **({"calls": answered.calls} if answered.calls > 1 else {}),
            **(
                {"answered_early": answer.answered_early.model_dump(mode="json")}
                if answer.answered_early
                else {}
            ),
        }
        self.metrics.questions.labels(call.alias, call.caller.name, answer.status, answer.stop_reason).inc()
        # The tier of the library's answer (None: the model's).
        tier = None if answer.verified is None else verified_tier(answer.verified.params)
        question_trace().finish(
            answer.status,
            answer.stop_reason,
            rows=answer.row_count,
            sql=answer.sql,
            agreement=answer.agreement,
            verified_tier=tier,
        )
        await self.line(call, record)
        text_bytes = sum(len(c.text.encode()) for c in response.content if isinstance(c, TextContent))
        if answer.verified is None:  # a verified answer is no episode: it would skew episode times
            self.metrics.observe_answer(call.alias, answer.seconds, answer.rounds, text_bytes)
        chose = f"; the person's choice ({answer.asked.reply})" if answer.asked is not None else ""
        logger.info(
            "answered on '%s' for token '%s': %s after %d rounds, %d tool calls, %.1f s (queued %.1f s)%s%s",
            call.alias,
            call.caller.name,
            answer.status,
            answer.rounds,
            answer.tool_calls,
            answer.seconds,
            answer.queued_seconds,
            f"; {call.samples} samples, agreement {_agreement(answer.agreement)}" if call.samples > 1 else "",
            chose,
            extra=call.log_fields(),
        )

    async def awaiting(self, call: Call, voting: dict[str, Any]) -> None:
        """The span's end, the episode-log and log lines of a 2026-07-28 question whose answer awaits its
        person's reply (no error: the reply is a call of its own, a trace of its own)."""
        question_trace().finish(AWAITING_CHOICE, "person_asked")
        await self.line(call, {"status": AWAITING_CHOICE, **voting})
        logger.info(
            "asked the person on '%s' for token '%s' to choose among %d answers (%d samples)",
            call.alias,
            call.caller.name,
            len(voting.get("candidates", [])),
            call.samples,
            extra=call.log_fields(),
        )

    async def working(self, call: Call, answer: AnswerOutput, calls: int) -> None:
        """A `working` result (the call's `calls`-th of its question): a metric, the call's span, an
        episode-log line, a log line."""
        self.metrics.working_calls.labels(call.alias, call.caller.name).inc()
        question_trace().finish(WORKING, answer.stop_reason)
        await self.line(
            call,
            {
                "status": WORKING,
                "stop_reason": answer.stop_reason,
                "call": calls,
                "rounds": answer.rounds,
                "tool_calls": answer.tool_calls,
                "samples_finished": answer.samples_finished,
                "seconds": answer.seconds,
            },
        )
        logger.info(
            "still working on '%s' for token '%s' after call %d: %d rounds, %.1f s; the question goes on",
            call.alias,
            call.caller.name,
            calls,
            answer.rounds,
            answer.seconds,
            extra=call.log_fields(),
        )

    async def unanswered(
        self,
        call: Call,
        outcome: tuple[str, str],
        said: str,
        done: dict[str, Any],
        error: BaseException | None = None,
    ) -> None:
        """The metric, the span's end, the whole episode-log line and a log line of a failed or cancelled
        call."""
        self.metrics.questions.labels(call.alias, call.caller.name, *outcome).inc()
        traced = question_trace()
        if not traced.ended:  # a question that outlived its call: that call ended its span (`working`)
            traced.finish(*outcome)
        await self.line(call, {"status": outcome[0], "stop_reason": outcome[1], "error": said, **done})
        internal = error is not None and not isinstance(error, SqaleError | ToolError)
        # Our bug: an error with its traceback. The runtime failing: a warning, for the operator to
        # act on (the backend leaves it to us, the caller). A cancel, a timeout, a limit: information.
        level = (
            logging.ERROR if internal else logging.WARNING if isinstance(error, BackendError) else logging.INFO
        )
        logger.log(
            level,
            "not answered on '%s' for token '%s' (%s, %s) after %d rounds, %d tool calls, %.1f s: %s",
            call.alias,
            call.caller.name,
            *outcome,
            done["rounds"],
            done["tool_calls"],
            done["seconds"],
            said,
            exc_info=error if internal else None,
            extra=call.log_fields(),
        )

    async def cancelled(self, call: Call, why: str, done: dict[str, Any]) -> None:
        """The lines of a question cancelled (`why`: a CANCELLED key), whatever cancels the caller."""
        outcome, said = CANCELLED[why]
        with anyio.CancelScope(shield=True):
            await self.unanswered(call, outcome, said, done)

    async def expired(self, call: Call, rounds: Sequence[Round], started: float) -> None:
        """The lines of a question answered while no call waited, whose answer no call came back for."""
        await self.unanswered(
            call,
            ("expired", "not_asked_again"),
            "it was answered, but no call of the same question came back for the answer "
            "within --working-timeout",
            activity(rounds, started),
        )

    async def refused(self, call: Call, refused: Refused) -> None:
        """The metric and span of a refused call, and (a few per token and minute) a short log line of it."""
        question_trace().finish("refused", refused.reason)
        await self.refusal(
            call.caller,
            call.question_id,
            alias=call.alias,
            question=call.question,
            samples=call.samples,
            refused=refused,
        )

    async def refusal(
        self,
        caller: Caller,
        question_id: str,
        *,
        alias: str,
        question: str,
        samples: int | None,
        refused: Refused,
    ) -> None:
        """The metric of a refused call and (a few per token and minute) a short log line of it: a question
        refused where it runs (`refused`), or any call refused when it arrives (door.Admission)."""
        self.metrics.questions.labels(alias, caller.name, "refused", refused.reason).inc()
        held_back = self.quotas.of(caller).refusal_lines.allow()
        if held_back is None:  # a flood of refusals must not fill the disk: counted, not written
            return
        if self.episode_log is not None:
            with anyio.CancelScope(shield=True):
                await self.episode_log.append(
                    {
                        "question_id": question_id,
                        "token": caller.name,
                        "database": alias,
                        "status": "refused",
                        "stop_reason": refused.reason,
                        "error": str(refused),
                        "question": clip(question, REFUSED_QUESTION_CHARS),
                        "samples": samples,
                        "refusals_not_logged": held_back,
                    }
                )
        logger.info(
            "refused on '%s' for token '%s' (%s): %s%s",
            alias,
            caller.name,
            refused.reason,
            refused,
            f" ({held_back} earlier refusals of this token were not logged)" if held_back else "",
            extra={"question_id": question_id, "token": caller.name},
        )

    async def line(self, call: Call, fields: dict[str, Any]) -> None:
        """Append one line to the episode log (when there is one), whatever cancels the call."""
        if self.episode_log is not None:
            notes = self.catalog.entry(call.alias).notes
            used = (
                None if notes is None else {"path": str(notes.path), "facts": notes.facts, "chars": notes.chars}
            )
            hide = self.databases[call.alias].hide
            hidden = {"hide_rules": list(hide.texts)} if hide else {}
            # Shielded: a question cancelled by the server's stop still leaves its whole line.
            with anyio.CancelScope(shield=True):
                await self.episode_log.append(
                    {
                        "question_id": call.question_id,
                        "token": call.caller.name,
                        "question": call.question,
                        "evidence": call.given_evidence,
                        "database": call.alias,
                        "notes": used,
                        "model": self.model_label,
                        **hidden,
                        **fields,
                    }
                )


def _agreement(agreement: float | None) -> str:
    return "none (no SQL ran)" if agreement is None else f"{agreement:.2f}"


def _library_fields(answer: AnswerOutput) -> dict[str, object]:
    """What the episode log keeps of the library's part in an answer (lines, not SQL)."""
    fields: dict[str, object] = {}
    if answer.verified is not None:
        source: dict[str, object] = {"library": answer.verified.library, "line": answer.verified.line}
        if answer.verified.params:  # the values read from the question (which the log holds too)
            source["params"] = {n: p.value for n, p in answer.verified.params.items()}
        fields["verified"] = source
    if answer.similar_verified:
        fields["similar_verified"] = [s.line for s in answer.similar_verified]
    if answer.verified_note:
        fields["verified_note"] = answer.verified_note
    return fields
