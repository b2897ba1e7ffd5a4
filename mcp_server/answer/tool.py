"""The answer_sql_question tool: checks the arguments, runs the samples, asks the person when they
disagree (choosing.py), shapes the answer."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Annotated, Any, TypeVar

import anyio
from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, InputRequiredResult, InputResponses, TextContent
from pydantic import Field

from agent.choices import should_ask
from agent.episode import Round
from agent.notes import evidence_with_notes
from agent.sampling import SampleRun
from agent.telemetry.gate import question_span, question_trace
from agent.verified import Consulted

from ..config.limits import AnswerLimits
from ..ongoing import Ongoing
from ..opening import ready_state
from ..serving.access import LOCAL_CALLER, Caller, caller_of
from ..serving.draining import ServerStopping
from ..serving.quotas import QuotaExceeded
from ..state import ServerState
from .arguments import checked_text, known_alias, resolve_alias
from .audit import (
    Answered,
    CallLog,
    Cancelled,
    Refused,
    activity,
    detail,
    failure_outcome,
    record_answered,
    record_awaiting,
    record_refused,
    record_unanswered,
)
from .call_budget import cancel_outcome, join_question, wait_for_answer, waiter_of, work_asker, working_response
from .choice_form import ChoiceForm, ChoiceState, PersonReply
from .choosing import (
    PersonAsker,
    answer_from_state,
    ask_in_call,
    choice_for,
    choice_state,
    may_propose,
    option_record,
    person_asker,
    settled,
)
from .output import AnswerOutput, answer_from_episode, answered_early, unanswered, with_vote
from .sampling import QuestionCall, ReportProgress, run_question
from .sizing import fitted_response, small_answer
from .tool_errors import (
    CallError,
    edge_error,
    empty_question,
    episode_timeout,
    samples_out_of_range,
    server_stopped_answering,
    server_stopping,
    stale_reply,
)
from .verified import consult_library, hinted, verified_answer, with_library
from .view_choice import VIEW_STATE_MAX_CHARS, seal_choice, view_choice_meta

T = TypeVar("T")
TOOL_NAME = "answer_sql_question"
ERROR_PREFIX = f"Error executing tool {TOOL_NAME}: "  # what the SDK puts before a tool error; ours match


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
) -> Annotated[CallToolResult, AnswerOutput] | InputRequiredResult:
    """Answer a question about a configured SQLite database with a small local text-to-SQL model."""
    arrived = time.perf_counter()  # the call's budget counts from here, as the host's timer does
    server_state = await ready_state(ctx.request_context.lifespan_context)
    caller = caller_of(ctx.request_context.request)
    with question_span("mcp", capture_content=server_state.settings.trace_content) as traced:
        try:
            if ctx.request_state is not None:  # 2026-07-28: the retry bringing the person's reply
                return await answer_reply(server_state, ctx.request_state, ctx.input_responses, caller=caller)
            return await answer_question(server_state, question, database, evidence,
                                         report_progress=ctx.report_progress, samples=samples, caller=caller,
                                         use_verified=verified is not False,
                                         person=person_asker(ctx, server_state.settings), arrived=arrived)
        except CallError as error:
            if not traced.ended:  # refused and failed calls ended their span where they were recorded
                traced.finish(error.status, error.kind)
            # Returned, not raised: the failed call carries structured content like every other result.
            alias = known_alias(database, caller.visible(server_state.catalog.aliases))
            return error_response(error, database=alias, model=server_state.model_label,
                                  question=question[:server_state.settings.max_question_chars])


def error_response(error: CallError, *, database: str | None, question: str, model: str) -> CallToolResult:
    """The isError result of a call that was not answered, with its structured content."""
    answer = unanswered(str(error), status=error.status, kind=error.kind, database=database,
                        question=question, model=model)
    return CallToolResult(content=[TextContent(type="text", text=f"{ERROR_PREFIX}{error}")],
                          structured_content=answer.model_dump(mode="json"), is_error=True)


async def answer_question(server_state: ServerState, question: str, database: str | None,
                          evidence: str | None, *, report_progress: ReportProgress,
                          samples: int | None = None, caller: Caller = LOCAL_CALLER,
                          use_verified: bool = True, person: PersonAsker | None = None,
                          arrived: float | None = None) -> CallToolResult | InputRequiredResult:
    """Run the call's samples (one episode by default; --ask-samples when `person` may be asked) and
    return the CallToolResult, or (2026-07-28) the form asking the person; errors are ToolErrors.

    The question runs in the server's OngoingQuestions: a call of a question already being answered
    waits for it; a call not answered within --call-budget of `arrived` returns status `working`
    (call_budget.py). Every call that gets past its arguments leaves one episode-log line, one log
    line and a count in the metrics (audit.py).
    """
    arrived = time.perf_counter() if arrived is None else arrived
    settings = server_state.settings
    asked = checked_text("question", question, settings.max_question_chars)
    if asked is None:
        raise empty_question()
    hint = checked_text("evidence", evidence, settings.max_evidence_chars)
    # Out of scope and nonexistent aliases get the same error: it lists only the caller's own.
    alias = resolve_alias(database, caller.visible(server_state.catalog.aliases))
    by_form = person is not None and person.by_form
    count = samples if samples is not None else settings.ask_samples if by_form else settings.samples
    if not 1 <= count <= settings.max_samples:
        raise samples_out_of_range(count, settings.max_samples)
    notes = server_state.catalog.entry(alias).notes
    call = QuestionCall(question=asked, alias=alias, samples=count, caller=caller,
                         evidence=evidence_with_notes(notes.text if notes else None, hint),
                         given_evidence=hint, notes=notes.text if notes else None, use_verified=use_verified,
                         run_all=by_form)

    def run_for(log: CallLog) -> Callable[[Ongoing], Awaitable[Answered | _AwaitingChoice]]:
        async def run(work: Ongoing) -> Answered | _AwaitingChoice:
            async def admitted(played: list[Round]) -> Answered | _AwaitingChoice:
                return await _run_admitted(server_state, call, log, work.report, played,
                                           work_asker(person, work), work)

            return await _recorded(server_state, log, call, hint, admitted, played=work.rounds,
                                   cancelled=lambda: cancel_outcome(work))

        return run

    work, log = await join_question(server_state, call, person, hint, run_for)
    if not await wait_for_answer(server_state, work, waiter_of(report_progress, person), arrived):
        return await working_response(server_state, work, call, log, hint)
    return await _deliver(server_state, work, log, call, hint)


async def _deliver(server_state: ServerState, work: Ongoing, log: CallLog, call: QuestionCall,
                   hint: str | None) -> CallToolResult | InputRequiredResult:
    """A finished question's response, recorded for this call (each call that waited on it leaves its
    own line); its error, recorded where it arose, raised to each call."""
    server_state.ongoing.take(work)
    if work.error is not None:
        raise work.error
    outcome = work.outcome
    if isinstance(outcome, _AwaitingChoice):
        await record_awaiting(server_state, log, call, hint, outcome.voting)
        return outcome.result
    if not isinstance(outcome, Answered):  # cancelled while this call waited: the server stops
        raise server_stopped_answering()
    return await _respond(server_state, log, call, hint, replace(outcome, calls=work.calls))


async def answer_reply(server_state: ServerState, sealed: str, responses: InputResponses | None, *,
                       caller: Caller) -> CallToolResult:
    """2026-07-28: the answer a person's reply makes, from the question's state (the SDK checked it is
    ours, unexpired, for this tool, these arguments and this token)."""
    state = ChoiceState.decode(sealed)
    return await answer_choice(server_state, caller, state, read=lambda form: (
        form.read_retry(responses, state.asked_at if state else 0.0, server_state.settings.ask_timeout)))


async def answer_choice(server_state: ServerState, caller: Caller, state: ChoiceState | None, *,
                        read: Callable[[ChoiceForm], PersonReply], via: str = "form") -> CallToolResult:
    """The answer a person's reply (`read` from the form) makes of a question's state: a 2026-07-28
    retry's, or the answer view's (`via`). Counts one unit of the token's minute, as its SQL runs
    again; leaves its lines under the question's id. The question and evidence are the state's."""
    if state is None or state.alias not in caller.visible(server_state.catalog.aliases):
        raise stale_reply()
    evidence = state.evidence
    log = CallLog(state.question_id, caller.name)
    call = QuestionCall(question=state.question, alias=state.alias, evidence=evidence, samples=state.samples,
                         caller=caller, given_evidence=evidence)

    async def admitted(_: list[Round]) -> Answered:
        try:
            server_state.quotas.check_rate(caller)
            with server_state.gate.admit() as stop_scope:
                with stop_scope:
                    form = state.form()
                    reply = read(form)
                    group = reply.group if reply.reply == "chose" else None
                    answer = await settled(server_state, call, form, reply,
                                           await answer_from_state(server_state, state, group))
                    return Answered(answer, voting={"reply_via": via, "asked_person": _asked_fields(answer)})
                raise Cancelled(str(server_stopped_answering()))
        except QuotaExceeded as exc:
            raise Refused(str(exc), "quota") from exc
        except ServerStopping as exc:
            raise Refused(str(server_stopping()), "stopping") from exc

    recorded = await _recorded(server_state, log, call, evidence, admitted)
    return await _respond(server_state, log, call, evidence, recorded)


@dataclass(frozen=True)
class _AwaitingChoice:
    """A 2026-07-28 question whose answer waits for its person: the form to send, the vote to log."""

    result: InputRequiredResult
    voting: dict[str, Any]


async def _recorded(server_state: ServerState, log: CallLog, call: QuestionCall, hint: str | None,
                    work: Callable[[list[Round]], Awaitable[T]], *, played: list[Round] | None = None,
                    cancelled: Callable[[], tuple[tuple[str, str], str]] | None = None) -> T:
    """`work`'s outcome; a question it does not answer (cancelled, refused, failed) is recorded, then
    its error raised as the caller must see it. `played` collects every round of every sample as it
    ends; `cancelled()` says how a cancel is written down (default: the client cancelled the call)."""
    question_trace().describe(database=call.alias, samples=call.samples, token=call.caller.name,
                              question=call.question, evidence=call.given_evidence,
                              hidden_names=server_state.databases[call.alias].all_hidden_names)
    played = [] if played is None else played
    started = time.perf_counter()
    try:
        return await work(played)
    except anyio.get_cancelled_exc_class():
        # Cancelled (the client's cancel, the question expired, the server stops): still one line.
        outcome, said = (("cancelled", "call_cancelled"), "the call was cancelled before it was answered") \
            if cancelled is None else cancelled()
        with anyio.CancelScope(shield=True):
            await record_unanswered(server_state, log, call, hint, outcome, said, activity(played, started))
        raise
    except Refused as refused:
        await record_refused(server_state, log, call, refused)
        raise
    except Exception as exc:
        failure = edge_error(exc, database=call.alias, remote=call.caller.remote, question_id=log.question_id)
        await record_unanswered(server_state, log, call, hint, failure_outcome(failure, exc),
                                detail(exc, call.alias), activity(played, started), error=exc)
        if failure is None or failure is exc:  # None: our own bug, on stdio: it propagates as it is
            raise
        raise failure from exc


async def _respond(server_state: ServerState, log: CallLog, call: QuestionCall, hint: str | None,
                   answered: Answered) -> CallToolResult:
    """The answer's response, recorded."""
    if small_answer(answered.answer):  # built at once: a thread hand-off costs more than building it
        response = build_response(answered.answer, server_state.limits)
    else:  # built in a worker thread: other clients' requests go on being served meanwhile
        response = await anyio.to_thread.run_sync(lambda: build_response(answered.answer, server_state.limits))
    await record_answered(server_state, log, call, hint, answered, response)
    return response if answered.meta is None else response.model_copy(update={"meta": answered.meta})


async def _run_admitted(server_state: ServerState, call: QuestionCall, log: CallLog,
                        report_progress: ReportProgress, played: list[Round],
                        person: PersonAsker | None, work: Ongoing) -> Answered | _AwaitingChoice:
    """Count the call's episodes against its token's minute, check the server still takes
    questions, then run the samples (each waits for a unit of its token's quota)."""
    # A question the verified library may answer counts as one episode until it is known not to.
    library_first = call.use_verified and call.alias in server_state.verified
    try:
        server_state.quotas.check_rate(call.caller, 1 if library_first else call.samples)
        with server_state.gate.admit() as stop_scope:
            with stop_scope:  # cancelled when the server's drain time runs out
                consulted = await consult_library(server_state, call)
                if consulted is not None and consulted.answer is not None:
                    # No episode: no slot to wait for, no model to ask.
                    return Answered(verified_answer(consulted, call.alias, server_state.settings.max_rows),
                                    consulted.answer.model_seconds, consulted.answer.tool_seconds)
                if library_first and call.samples > 1:
                    server_state.quotas.check_rate(call.caller, call.samples - 1)
                hinted_call = hinted(call, consulted, server_state.settings.verified_hints)
                return await _run_samples(server_state, hinted_call,
                                          log, report_progress, played, consulted, person, work)
            raise Cancelled(str(server_stopped_answering()))
    except QuotaExceeded as exc:
        raise Refused(str(exc), "quota") from exc
    except ServerStopping as exc:
        raise Refused(str(server_stopping()), "stopping") from exc


async def _run_samples(server_state: ServerState, call: QuestionCall, log: CallLog,
                       report_progress: ReportProgress, played: list[Round], consulted: Consulted | None,
                       person: PersonAsker | None, work: Ongoing) -> Answered | _AwaitingChoice:
    """Run the samples and vote, then ask the person when they disagree (and may be asked).

    Our errors (SqaleError) propagate: the edge maps them for the caller.
    """
    asked = await run_question(server_state, call, report_progress, played, work=work)
    chosen = asked.chosen
    if chosen is None or chosen.result is None:  # every sample ran out of time
        raise episode_timeout(server_state.settings.episode_timeout)
    voted = chosen.result
    early = answered_early(asked, work.finish_now.is_set(), server_state.episode_settings.max_tool_turns + 1)

    async def answer_of(run: SampleRun) -> AnswerOutput:
        result = run.result
        assert result is not None  # every run answered here finished (the chosen, or a group's)
        # Built in a worker thread: other clients' requests go on being served meanwhile.
        built = await anyio.to_thread.run_sync(lambda: answer_from_episode(
            result, database=call.alias, model=server_state.model_label,
            max_rows=server_state.settings.max_rows,
            queued_seconds=run.queued_seconds))
        return with_library(with_vote(built, asked), consulted).model_copy(update={"answered_early": early})

    voting = {} if call.samples == 1 else {
        **asked.vote_fields(), "chosen_sample": chosen.index,
        "seeds_finished": [run.seed for _, run in sorted(asked.outcome.results.items())]}
    runs = [asked.outcome.results[group.members[0]] for group in asked.outcome.groups]
    asks = person is not None and should_ask(person.mode, asked.samples, len(runs))
    if person is None or not asks or (not person.by_form and len(runs) < 2):
        return Answered(await answer_of(chosen), voted.model_seconds, voted.tool_seconds, voting)
    proposes = may_propose(server_state, call) and person.by_form
    form = ChoiceForm(choice_for(asked, call.question), propose=proposes)
    offered = [option.group for option in form.choice.options]
    if not person.by_form:  # an MCP Apps host without forms: the answer view offers the same choice
        answer = await answer_of(chosen)
        records = [option_record(k, runs[k], await answer_of(runs[k])) for k in offered]
        state = choice_state(log.question_id, time.time(), form, records, answer, call.given_evidence,
                             VIEW_STATE_MAX_CHARS)
        token = seal_choice(server_state.view_choices, state, call.caller)
        return Answered(answer, voted.model_seconds, voted.tool_seconds, voting,
                        meta=view_choice_meta([option.label for option in form.choice.options], token))
    if person.in_call:  # 2025-11-25: ask now, and wait
        reply = await ask_in_call(person, form)
        run = runs[reply.group] if reply.reply == "chose" and reply.group is not None else chosen
        answer = await settled(server_state, call, form, reply, await answer_of(run))
        assert run.result is not None
        return Answered(answer, run.result.model_seconds, run.result.tool_seconds,
                        {**voting, "chosen_sample": run.index, "asked_person": _asked_fields(answer)})
    records = [option_record(k, runs[k], await answer_of(runs[k])) for k in offered]
    vote_answer = await answer_of(chosen)
    state = choice_state(log.question_id, time.time(), form, records, vote_answer, call.given_evidence)
    return _AwaitingChoice(form.input_required(state),
                           {**voting, "asked_person": {"options": form.titles, "reply": "awaiting"}})


def _asked_fields(answer: AnswerOutput) -> dict[str, Any]:
    return {} if answer.asked is None else answer.asked.model_dump(mode="json")


def build_response(answer: AnswerOutput, limits: AnswerLimits) -> CallToolResult:
    """The CallToolResult carrying the structured answer with its readable text, within its size."""
    return fitted_response(answer, limits)
