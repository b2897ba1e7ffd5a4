"""The answer_sql_question tool: checks the arguments, runs the samples, shapes the answer."""

from __future__ import annotations

import copy
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, cast

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import Field

from agent.episode import EpisodeResult, Round
from agent.episode_text import clip
from agent.errors import BackendError, SqaleError
from agent.notes import evidence_with_notes

from ..config.limits import AnswerLimits
from ..runtime import ServerRuntime
from ..serving.access import LOCAL_CALLER, Caller, caller_of
from ..serving.draining import ServerStopping
from ..serving.quotas import QuotaExceeded
from .output import AnswerOutput, answer_from_episode, trace_of, unanswered, with_vote
from .prompt_cache_output import prompt_cache_of
from .sampling import QuestionAsked, ReportProgress, run_question
from .sizing import fitted_response
from .tool_errors import (
    CallError,
    edge_error,
    empty_question,
    episode_timeout,
    samples_out_of_range,
    server_stopped_answering,
    server_stopping,
    text_too_long,
    tool_error_for,
    unknown_database,
)
from .verified import audit_fields, consult_library, hinted, verified_answer, with_library

logger = logging.getLogger(__name__)

TOOL_NAME = "answer_sql_question"
ERROR_PREFIX = f"Error executing tool {TOOL_NAME}: "  # what the SDK puts before a tool error; ours match
REFUSED_QUESTION_CHARS = 80  # what a refused call's log line keeps of its question
# An answer within both is built on the event loop, a larger one in a thread (bench_server_cost).
SMALL_ANSWER_CELLS = 200
SMALL_ANSWER_TRACE = 16
SMALL_ANSWER_CHARS = 8_000  # of the question, the SQL and the cells


async def answer_sql_question(
    question: Annotated[str, Field(description="The question in plain language")],
    ctx: Context,
    database: Annotated[str | None, Field(description="Alias of a configured database (listed "
                                                      "in the tool description); may be omitted "
                                                      "when only one is configured")] = None,
    evidence: Annotated[str | None, Field(description="Optional hints about the data, e.g. what "
                                                      "a term means in columns and values")] = None,
    samples: Annotated[int | None, Field(description="How many independent attempts to make and "
                                                     "vote on by their results (more is slower but "
                                                     "says how sure the answer is: see `agreement`); "
                                                     "default: the server's")] = None,
    verified: Annotated[bool | None, Field(description="false: answer with the model even when the "
                                                       "database's verified library holds this "
                                                       "question; default true")] = None,
) -> Annotated[CallToolResult, AnswerOutput]:
    """Answer a question about a configured SQLite database with a small local text-to-SQL model."""
    # The SDK types the lifespan's value as a dict; ours is the ServerRuntime open_runtime yields.
    runtime = cast(ServerRuntime, ctx.request_context.lifespan_context)
    caller = caller_of(ctx.request_context.request)
    try:
        return await answer_question(runtime, question, database, evidence,
                                     report_progress=ctx.report_progress, samples=samples, caller=caller,
                                     use_verified=verified is not False)
    except CallError as error:
        # Returned, not raised: the failed call carries structured content like every other result.
        return error_response(error, database=known_alias(database, caller.visible(runtime.catalog.aliases)),
                              question=question[:runtime.settings.max_question_chars],
                              model=runtime.model_label)


def error_response(error: CallError, *, database: str | None, question: str, model: str) -> CallToolResult:
    """The isError result of a call that was not answered, with its structured content."""
    answer = unanswered(str(error), status=error.status, kind=error.kind, database=database,
                        question=question, model=model)
    return CallToolResult(content=[TextContent(type="text", text=f"{ERROR_PREFIX}{error}")],
                          structured_content=answer.model_dump(mode="json"), is_error=True)


def known_alias(given: str | None, aliases: Sequence[str]) -> str | None:
    """The alias `given` names, or None when it names none of `aliases`."""
    try:
        return resolve_alias(given, aliases)
    except CallError:
        return None


def advertised_input_schema(schema: Mapping[str, Any], *, aliases: Sequence[str], max_question_chars: int,
                            max_evidence_chars: int, max_samples: int, example: str, default_samples: int = 1,
                            verified: bool = True) -> dict[str, Any]:
    """The tool's input schema with what the server enforces: alias enum, lengths, ranges, an example.

    Each limit is stated here once; the tool description states the answer's limits. `verified`
    is advertised only when a database has a verified library (`verified=False` drops it).
    Optional arguments are advertised plainly, as the type they take, with the default the
    server applies where it has one: an argument that may be omitted needs no null branch, and
    form-filling clients read an `anyOf` as a value to send (and fill a yes/no field with "no"
    unless told the default). The tool still takes null for each of them (its signature),
    meaning the same as leaving it out.
    """
    properties = copy.deepcopy(dict(schema["properties"]))
    if not verified:
        properties.pop("verified", None)
    given = properties["question"].get("description", "The question in plain language").rstrip(". ")
    properties["question"].update(
        description=f"{given}, e.g. '{example}'", maxLength=max_question_chars, examples=[example])
    plain: dict[str, dict[str, Any]] = {
        "database": {"type": "string", "enum": list(aliases)},
        "evidence": {"type": "string", "maxLength": max_evidence_chars},
        "samples": {"type": "integer", "minimum": 1, "maximum": max_samples, "default": default_samples},
        "verified": {"type": "boolean", "default": True}}
    for name, shape in plain.items():
        if name in properties:
            properties[name] = _plain_optional(properties[name], shape)
    return {**schema, "properties": properties}


def _plain_optional(advertised: Mapping[str, Any], shape: dict[str, Any]) -> dict[str, Any]:
    """An optional property as `shape` with its title and description: no `anyOf` null branch, no
    `default: null` (a value its own type rejects; `shape` gives the real default where there is one)."""
    return {**{k: v for k, v in advertised.items() if k not in ("anyOf", "default", "type")}, **shape}


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


async def answer_question(runtime: ServerRuntime, question: str, database: str | None,
                          evidence: str | None, *, report_progress: ReportProgress,
                          samples: int | None = None, caller: Caller = LOCAL_CALLER,
                          use_verified: bool = True) -> CallToolResult:
    """Run the call's samples (one episode by default) and return the CallToolResult; errors are ToolErrors.

    Every call that gets past its arguments leaves one episode-log line, one log line and a
    count in the metrics, whether it is answered, fails, is refused or is cancelled; refusals
    write short lines, and few of them per token and minute.
    """
    settings = runtime.settings
    asked = checked_text("question", question, settings.max_question_chars)
    if asked is None:
        raise empty_question()
    hint = checked_text("evidence", evidence, settings.max_evidence_chars)
    # Out of scope and nonexistent aliases get the same error: it lists only the caller's own.
    alias = resolve_alias(database, caller.visible(runtime.catalog.aliases))
    asker = _Asker(uuid.uuid4().hex[:12], caller.name)
    count = settings.samples if samples is None else samples
    if not 1 <= count <= settings.max_samples:
        raise samples_out_of_range(count, settings.max_samples)
    notes = runtime.catalog.entry(alias).notes
    call = QuestionAsked(question=asked, alias=alias, samples=count, caller=caller,
                         evidence=evidence_with_notes(notes.text if notes else None, hint),
                         given_evidence=hint, notes=notes.text if notes else None, use_verified=use_verified)
    played: list[Round] = []  # every round of every sample, as it ends
    started = time.perf_counter()
    try:
        answer, episode, voting = await _run_admitted(runtime, call, report_progress, played)
    except anyio.get_cancelled_exc_class():
        # The client cancelled the call (or its session ended): still one line of what it did.
        with anyio.CancelScope(shield=True):
            await _record_unanswered(runtime, asker, call, hint, ("cancelled", "call_cancelled"),
                                     "the call was cancelled before it was answered",
                                     _activity(played, started))
        raise
    except _Refused as refused:
        await _record_refused(runtime, asker, call, refused)
        raise
    except Exception as exc:
        failure = edge_error(exc, database=alias, remote=caller.remote, question_id=asker.question_id)
        await _record_unanswered(runtime, asker, call, hint, _failure_outcome(failure, exc),
                                 _detail(exc, alias), _activity(played, started), error=exc)
        if failure is None or failure is exc:  # None: our own bug, on stdio: it propagates as it is
            raise
        raise failure from exc
    # A failed answer's last reply shows what the model did; other lines do not carry the key.
    replied = {} if answer.last_reply is None else {"last_reply": answer.last_reply}
    record = {**answer.model_dump(mode="json", include=set(_AUDITED_ANSWER_FIELDS)), **replied,
              "model_seconds": round(episode.model_seconds, 3),
              "tool_seconds": round(episode.tool_seconds, 3),
              "queued_seconds": round(answer.queued_seconds, 3), **voting, **audit_fields(answer)}
    runtime.metrics.questions.labels(alias, caller.name, answer.status, answer.stop_reason).inc()
    await _audit(runtime, asker, asked, hint, alias, record)
    if small_answer(answer):  # built at once: a thread hand-off costs more than building it
        response = build_response(answer, runtime.limits)
    else:  # built in a worker thread: other clients' requests go on being served meanwhile
        response = await anyio.to_thread.run_sync(lambda: build_response(answer, runtime.limits))
    text_bytes = sum(len(c.text.encode()) for c in response.content if isinstance(c, TextContent))
    if answer.verified is None:  # a verified answer is no episode: it would skew episode times
        runtime.metrics.observe_answer(alias, answer.seconds, answer.rounds, text_bytes)
    logger.info("answered on '%s' for token '%s': %s after %d rounds, %d tool calls, %.1f s "
                "(queued %.1f s)%s", alias, caller.name, answer.status, answer.rounds,
                answer.tool_calls, answer.seconds, answer.queued_seconds,
                f"; {count} samples, agreement {_agreement(answer.agreement)}" if count > 1 else "",
                extra=asker.log_fields())
    return response


def _agreement(agreement: float | None) -> str:
    return "none (no SQL ran)" if agreement is None else f"{agreement:.2f}"


@dataclass(frozen=True)
class _Asker:
    """Who asked, for the log lines of one question."""

    question_id: str
    token: str

    def log_fields(self) -> dict[str, str]:
        """The `extra` of this question's log records (JSON logs show them)."""
        return {"question_id": self.question_id, "token": self.token}


class _Refused(CallError):
    """A question refused before it ran (quota, or the server stopping); `reason` labels it."""

    status = "refused"

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message, reason)
        self.reason = reason


class _Cancelled(CallError):
    """A question cancelled because the server stopped before it was answered."""

    status = "cancelled"

    def __init__(self, message: str) -> None:
        super().__init__(message, "server_stopped")


def _failure_outcome(failure: ToolError | None, cause: BaseException) -> tuple[str, str]:
    """(status, reason) of a call that was not answered, for the metrics and the episode log."""
    if isinstance(failure, _Cancelled):
        return "cancelled", "server_stopping"
    if isinstance(cause, ToolError):  # ours, with no cause: the episode timeout
        return "error", type(cause.__cause__).__name__ if cause.__cause__ is not None else "episode_timeout"
    return "error", type(cause).__name__


def _detail(exc: BaseException, alias: str) -> str:
    """The full text of an error, as a stdio client reads it, for the server's own logs."""
    if isinstance(exc, SqaleError):
        return str(tool_error_for(exc, database=alias))
    return str(exc) if isinstance(exc, ToolError) else repr(exc)


def _activity(played: Sequence[Round], started: float) -> dict[str, Any]:
    """What a question that was not answered had done: its rounds, tool calls, time and trace."""
    trace = trace_of(played)
    return {"rounds": len(played), "tool_calls": len(trace),
            "seconds": round(time.perf_counter() - started, 3),
            "trace": [entry.model_dump(mode="json") for entry in trace],
            "prompt_cache": [entry.model_dump(mode="json") for entry in prompt_cache_of(played)]}


async def _record_unanswered(runtime: ServerRuntime, asker: _Asker, call: QuestionAsked,
                             hint: str | None, outcome: tuple[str, str], detail: str,
                             activity: dict[str, Any], error: BaseException | None = None) -> None:
    """The metric, the whole episode-log line and a log line of a failed or cancelled call."""
    runtime.metrics.questions.labels(call.alias, asker.token, *outcome).inc()
    await _audit(runtime, asker, call.question, hint, call.alias,
                 {"status": outcome[0], "stop_reason": outcome[1], "error": detail, **activity})
    internal = error is not None and not isinstance(error, SqaleError | ToolError)
    # Our bug: an error with its traceback. The runtime failing: a warning, for the operator to
    # act on (the backend leaves it to us, the caller). A cancel, a timeout, a limit: information.
    level = logging.ERROR if internal else logging.WARNING if isinstance(error, BackendError) else logging.INFO
    logger.log(level,
               "not answered on '%s' for token '%s' (%s, %s) after %d rounds, %d tool calls, %.1f s: %s",
               call.alias, asker.token, *outcome, activity["rounds"], activity["tool_calls"],
               activity["seconds"], detail, exc_info=error if internal else None,
               extra=asker.log_fields())


async def _record_refused(runtime: ServerRuntime, asker: _Asker, call: QuestionAsked,
                          refused: _Refused) -> None:
    """The metric of a refused call, and (a few per token and minute) a short log line of it."""
    runtime.metrics.questions.labels(call.alias, asker.token, "refused", refused.reason).inc()
    held_back = runtime.quotas.of(call.caller).refusal_lines.allow()
    if held_back is None:  # a flood of refusals must not fill the disk: counted, not written
        return
    if runtime.episode_log is not None:
        with anyio.CancelScope(shield=True):
            await runtime.episode_log.append({
                "question_id": asker.question_id, "token": asker.token, "database": call.alias,
                "status": "refused", "stop_reason": refused.reason, "error": str(refused),
                "question": clip(call.question, REFUSED_QUESTION_CHARS), "samples": call.samples,
                "refusals_not_logged": held_back})
    logger.info("refused on '%s' for token '%s' (%s): %s%s", call.alias, asker.token, refused.reason,
                refused, f" ({held_back} earlier refusals of this token were not logged)" if held_back else "",
                extra=asker.log_fields())


async def _run_admitted(runtime: ServerRuntime, call: QuestionAsked, report_progress: ReportProgress,
                        played: list[Round]) -> tuple[AnswerOutput, EpisodeResult, dict[str, Any]]:
    """Count the call's episodes against its token's minute, check the server still takes
    questions, then run the samples (each waits for a unit of its token's quota)."""
    # A question the verified library may answer counts as one episode until it is known not to.
    library_first = call.use_verified and call.alias in runtime.verified
    try:
        runtime.quotas.check_rate(call.caller, 1 if library_first else call.samples)
        with runtime.gate.admit() as stop_scope:
            with stop_scope:  # cancelled when the server's drain time runs out
                consulted = await consult_library(runtime, call)
                if consulted is not None and consulted.answer is not None:
                    # No episode: no slot to wait for, no model to ask.
                    return (verified_answer(consulted, call.alias, runtime.settings.max_rows),
                            consulted.answer, {})
                if library_first and call.samples > 1:
                    runtime.quotas.check_rate(call.caller, call.samples - 1)
                answer, result, voting = await _run_samples(
                    runtime, hinted(call, consulted, runtime.settings.verified_hints), report_progress, played)
                return with_library(answer, consulted), result, voting
            raise _Cancelled(str(server_stopped_answering()))
    except QuotaExceeded as exc:
        raise _Refused(str(exc), "quota") from exc
    except ServerStopping as exc:
        raise _Refused(str(server_stopping()), "stopping") from exc


# What the audit line keeps of an answer (not the rows: the SQL and the count say what came back).
_AUDITED_ANSWER_FIELDS = frozenset({"status", "sql", "error", "stop_reason", "row_count", "rounds",
                                    "tool_calls", "tokens", "seconds", "trace", "prompt_cache"})


async def _run_samples(runtime: ServerRuntime, call: QuestionAsked, report_progress: ReportProgress,
                       played: list[Round]) -> tuple[AnswerOutput, EpisodeResult, dict[str, Any]]:
    """Run the samples and vote; the answer, its episode and the vote for the audit.

    Our errors (SqaleError) propagate: the edge maps them for the caller.
    """
    asked = await run_question(runtime, call, report_progress, played)
    chosen = asked.chosen
    if chosen is None or chosen.result is None:  # every sample ran out of time
        raise episode_timeout(runtime.settings.episode_timeout)
    result = chosen.result
    # Built in a worker thread: other clients' requests go on being served meanwhile.
    answer = await anyio.to_thread.run_sync(lambda: answer_from_episode(
        result, database=call.alias, model=runtime.model_label, max_rows=runtime.settings.max_rows,
        queued_seconds=chosen.queued_seconds))
    answer = with_vote(answer, asked)
    if call.samples == 1:
        return answer, result, {}
    voting = {**asked.vote_fields(), "chosen_sample": chosen.index,
              "seeds_finished": [run.seed for _, run in sorted(asked.outcome.results.items())]}
    return answer, result, voting


def small_answer(answer: AnswerOutput) -> bool:
    """True for an answer small enough to build on the event loop (a verified hit, a count, a
    short list): building it takes about as long as handing it to a thread and back."""
    if len(answer.rows) * max(len(answer.columns), 1) > SMALL_ANSWER_CELLS \
            or len(answer.trace) > SMALL_ANSWER_TRACE or len(answer.candidates) > 1:
        return False
    cell_chars = sum(len(cell) if isinstance(cell, str) else 32 for row in answer.rows for cell in row)
    return len(answer.question) + len(answer.sql or "") + cell_chars <= SMALL_ANSWER_CHARS


def build_response(answer: AnswerOutput, limits: AnswerLimits) -> CallToolResult:
    """The CallToolResult carrying the structured answer with its readable text, within its size."""
    return fitted_response(answer, limits)


async def _audit(runtime: ServerRuntime, asker: _Asker, question: str, evidence: str | None, alias: str,
                 fields: dict[str, Any]) -> None:
    if runtime.episode_log is not None:
        notes = runtime.catalog.entry(alias).notes
        used = None if notes is None else {"path": str(notes.path), "facts": notes.facts,
                                           "chars": notes.chars}
        hide = runtime.databases[alias].hide
        hidden = {"hide_rules": list(hide.texts)} if hide else {}
        # Shielded: a question cancelled by the server's stop still leaves its whole line.
        with anyio.CancelScope(shield=True):
            await runtime.episode_log.append({
                "question_id": asker.question_id, "token": asker.token,
                "question": question, "evidence": evidence, "database": alias, "notes": used,
                "model": runtime.model_label, **hidden, **fields})
