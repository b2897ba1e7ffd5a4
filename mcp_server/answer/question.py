"""Running a question: `Answering`, the narrow service the tools are handed, from a checked call to
its result.

A call's question runs in the server's OngoingQuestions (mcp_server/ongoing.py): a call of a
question already being answered waits for it; a call not answered within --call-budget of its
arrival returns status `working`, and the question goes on for the next call of it. Running it
counts its episodes against its token's minute, while the server still takes questions; the
database's verified library may answer it at once (verified.py); else its K samples run
(samples.py; one episode by default; agent.sampling votes among them), each holding a unit of its
token's quota, a worker and a runtime slot, and reporting its rounds as progress. When they
disagree and the person may be asked, the call's Asker asks (asking.py). Every call that gets past its arguments
leaves one episode-log line, one log line and a count in the metrics (audit.py).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from dataclasses import replace
from functools import partial
from typing import Any

import anyio
from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, InputRequiredResult, TextContent

from agent import (
    Question,
    Round,
    SampledAnswer,
    SampleRun,
    choice_of,
    question_trace,
    sources_of,
)

from ..ongoing import Ongoing, QuestionKey, ReportProgress, TooManyWorking, Waiter
from ..serving.access import Caller
from ..serving.draining import ServerStopping
from ..serving.quotas import QuotaExceeded
from ..state import ServerState
from .asking import Asker, Disagreement, ReadReply, answer_from_state, asked_fields, asker_for, with_choice
from .audit import Answered, Awaiting, Call, Records, activity
from .choice_form import ChoiceForm, ChoiceState, PersonReply, ViewTokens
from .output import AnswerOutput, working_answer
from .samples import answer_from_episode, answered_early, run_samples, with_vote
from .sizing import fitted_response, small_answer
from .tool_errors import (
    CallError,
    Refused,
    detail,
    edge_error,
    episode_timeout,
    failed_result,
    failure_outcome,
    server_stopped_answering,
    server_stopping,
    stale_reply,
    too_many_working,
)
from .verified import VerifiedLibraries, verified_answer, with_library


class Answering:
    """What the tools need of the running server, and no more: a call's answer, a person's later
    reply, a proposal, and the failed result of a call; built over the server state once it is open."""

    def __init__(self, state: ServerState) -> None:
        self._state = state
        self.settings, self.model_label = state.settings, state.model_label
        self.view_tokens = ViewTokens.from_settings(state.settings)
        self.records = Records(
            episode_log=state.episode_log,
            metrics=state.metrics,
            quotas=state.quotas,
            catalog=state.catalog,
            databases=state.databases,
            model_label=state.model_label,
        )
        self.library = VerifiedLibraries(
            state.verified,
            state.databases,
            settings=state.settings,
            episode=state.episode_settings,
            aliases=state.catalog.aliases,
            quotas=state.quotas,
            metrics=state.metrics,
        )

    def aliases(self, caller: Caller) -> tuple[str, ...]:
        """The configured databases `caller` may use."""
        return caller.visible(self._state.catalog.aliases)

    def notes(self, alias: str) -> str | None:
        """The database's notes, as the evidence the model reads starts with them."""
        notes = self._state.catalog.entry(alias).notes
        return notes.text if notes else None

    def asker(self, ctx: Context[Any, Any]) -> Asker | None:
        """How this call's client lets the server ask its person (asking.asker_for)."""
        return asker_for(ctx, self.settings, self.view_tokens)

    def view_choice(self, token: str, caller: Caller) -> ChoiceState | None:
        """The question state the answer view's `token` holds for `caller` (None: not ours, or expired)."""
        return self.view_tokens.open(token, caller)

    def asks_again(self, caller: Caller, arguments: object) -> bool:
        """Whether a call's unchecked `arguments` ask a question its token has being answered (it then
        starts no episode: ongoing.OngoingQuestions.asks)."""
        return self._state.ongoing.asks(caller.name, arguments)

    def admit(self, caller: Caller) -> AbstractContextManager[None]:
        """Count the first episode of a call when it arrives (QuotaExceeded: serving/quotas.py)."""
        return self._state.quotas.admit(caller)

    def failed(self, error: CallError, *, database: str | None, question: str) -> CallToolResult:
        """The isError result of a call that was not answered, with its structured content."""
        return failed_result(
            error,
            database=database,
            question=question[: self.settings.max_question_chars],
            model=self.model_label,
        )

    async def ask(
        self, call: Call, asker: Asker | None, report: ReportProgress, arrived: float | None = None
    ) -> CallToolResult | InputRequiredResult:
        """The call's result: the answer, (2026-07-28) the form asking the person, or `working` when
        its question is not answered within --call-budget of `arrived` (default: now); errors are
        ToolErrors."""
        arrived = time.perf_counter() if arrived is None else arrived
        work, call = await self._join(call, asker)
        settings = self.settings
        try:
            done = await self._state.ongoing.wait(
                work,
                Waiter(report, asker.send_form if asker else None),
                arrived=arrived,
                budget=settings.call_budget,
                one_call_answers=settings.one_call_answers,
            )
        except anyio.get_cancelled_exc_class():
            question_trace().finish("cancelled", "call_cancelled")  # this call's span, ended here
            raise
        if not done:  # the call ends saying `working`; the question goes on
            answer = working_answer(
                work, database=call.alias, question=call.question, samples=call.samples, model=self.model_label
            )
            await self.records.working(call, answer, work.calls)
            return fitted_response(answer, self._state.limits)
        # A finished question's response, recorded for this call (each call that waited on it leaves
        # its own line); its error, recorded where it arose, raised to each call.
        self._state.ongoing.take(work)
        if work.error is not None:
            raise work.error
        outcome = work.outcome
        if isinstance(outcome, Awaiting):
            await self.records.awaiting(call, outcome.voting)
            return outcome.result
        if not isinstance(outcome, Answered):  # cancelled while this call waited: the server stops
            raise server_stopped_answering()
        return await self._respond(call, replace(outcome, calls=work.calls))

    async def reply(
        self, caller: Caller, state: ChoiceState | None, read: ReadReply, via: str = "form"
    ) -> CallToolResult:
        """The answer a person's later reply (`read` from the form) makes of a question's state: a
        2026-07-28 retry's, or the answer view's (`via`). Counts one unit of the token's minute, as its
        SQL runs again; leaves its lines under the question's id. The question and evidence are the
        state's (the SDK, or our sealer, checked it is ours, unexpired, for this token)."""
        if state is None or state.alias not in self.aliases(caller):
            raise stale_reply()
        call = Call(
            caller,
            state.question,
            state.alias,
            state.samples,
            given_evidence=state.evidence,
            question_id=state.question_id,
        )

        async with self._recorded(call, []):
            with self._admitted(caller, 1):
                form = state.form()
                reply = read(state, form)
                group = reply.group if reply.reply == "chose" else None
                answer = await self._settle(
                    call,
                    form,
                    reply,
                    await answer_from_state(
                        state,
                        group,
                        self._state.databases[state.alias],
                        self._state.episode_settings,
                        self.settings.max_rows,
                    ),
                )
        return await self._respond(
            call, Answered(answer, voting={"reply_via": via, "asked_person": asked_fields(answer)})
        )

    async def save(
        self, caller: Caller, *, database: str, question: str, sql: str, evidence: str | None
    ) -> CallToolResult:
        """A proposal for the database's verified library, as a tool result (verified.py)."""
        return await self.library.save(caller, database=database, question=question, sql=sql, evidence=evidence)

    async def _join(self, call: Call, asker: Asker | None) -> tuple[Ongoing, Call]:
        """The question this call asks, and the call as its lines name it: the one being answered under
        its key, or a new one. A new one past the token's --token-max-working is refused."""
        key = QuestionKey(
            token=call.caller.name,
            database=call.alias,
            question=call.question,
            evidence=call.given_evidence,
            samples=call.samples,
            verified=call.use_verified,
            asking="none" if asker is None else asker.kind,
        )
        ongoing = self._state.ongoing
        work = ongoing.find(key)
        if work is not None:  # the same question, already being answered: this call waits for it too
            self.records.describe(call)
            return work, replace(call, question_id=work.question_id)

        async def expired(work: Ongoing) -> None:
            await self.records.expired(call, work.rounds, work.started)

        try:
            return ongoing.start(key, call.question_id, partial(self._run, call, asker), expired), call
        except TooManyWorking as exc:
            refused = too_many_working(exc.token, exc.limit)
            await self.records.refused(call, refused)
            raise refused from exc

    async def _run(self, call: Call, asker: Asker | None, work: Ongoing) -> Answered | Awaiting:
        """The question's outcome, run in the ongoing question `work` (its rounds, its progress)."""
        library_first = self.library.first(call)
        # A question the verified library may answer counts as one episode until it is known not to.
        async with self._recorded(call, work.rounds, why=lambda: work.cancelled_why or "server_stopped"):
            with self._admitted(call.caller, 1 if library_first else call.samples):
                consulted = await self.library.consult(call)
                if consulted is not None and consulted.answer is not None:
                    # No episode: no slot to wait for, no model to ask.
                    return Answered(
                        verified_answer(consulted, call.alias, self.settings.max_rows),
                        consulted.answer.model_seconds,
                        consulted.answer.tool_seconds,
                    )
                if library_first and call.samples > 1:
                    self._state.quotas.check_rate(call.caller, call.samples - 1)
                hinted = self.library.hinted(call, consulted)
                state = self._state
                question = Question(
                    hinted.question,
                    state.databases[hinted.alias],
                    hinted.evidence,
                    state.episode_settings,
                    state.prompts,
                )
                asked = await run_samples(
                    state, hinted.caller, question, hinted.samples, early_stop=not hinted.run_all, work=work
                )
                chosen = asked.chosen
                if chosen is None or chosen.result is None:  # every sample ran out of time
                    raise episode_timeout(self.settings.episode_timeout)
                return await self._answer(
                    call, asker, work, asked, chosen, lambda answer: with_library(answer, consulted)
                )

    async def _answer(
        self,
        call: Call,
        asker: Asker | None,
        work: Ongoing,
        asked: SampledAnswer,
        chosen: SampleRun,
        shown: Callable[[AnswerOutput], AnswerOutput],
    ) -> Answered | Awaiting:
        """The vote's answer, or the person's when the samples disagree and they may be asked.
        Our errors (SqaleError) propagate: the edge maps them for the caller."""
        early = answered_early(asked, work.finish_now.is_set(), self._state.episode_settings.max_tool_turns + 1)

        async def answer_of(run: SampleRun) -> AnswerOutput:
            result = run.result
            assert result is not None  # every run answered here finished (the chosen, or a group's)
            # Built in a worker thread: other clients' requests go on being served meanwhile.
            built = await anyio.to_thread.run_sync(
                lambda: answer_from_episode(
                    result,
                    database=call.alias,
                    model=self.model_label,
                    max_rows=self.settings.max_rows,
                    queued_seconds=run.queued_seconds,
                )
            )
            return shown(with_vote(built, asked)).model_copy(update={"answered_early": early})

        voting = (
            {}
            if call.samples == 1
            else {
                **asked.vote_fields(),
                "chosen_sample": chosen.index,
                "seeds_finished": [run.seed for _, run in sorted(asked.outcome.results.items())],
            }
        )
        runs = [asked.outcome.results[group.members[0]] for group in asked.outcome.groups]
        if asker is None or not asker.asks(asked.samples, len(runs)):
            assert chosen.result is not None
            return Answered(
                await answer_of(chosen), chosen.result.model_seconds, chosen.result.tool_seconds, voting
            )
        proposes = asker.by_form and self.library.may_propose(call)
        form = ChoiceForm(choice_of(call.question, sources_of(asked), asked.samples), propose=proposes)
        return await asker.ask(
            Disagreement(
                call, form, runs, chosen, voting, answer_of, partial(self._settle, call), work.send_form
            )
        )

    async def _settle(
        self, call: Call, form: ChoiceForm, reply: PersonReply, answer: AnswerOutput
    ) -> AnswerOutput:
        """The answer the reply makes of `answer` (the chosen option's, or the vote's), with the
        proposal the person asked for filed."""
        group = reply.group if reply.reply == "chose" else None
        proposal = None
        if reply.propose and group is not None and form.propose and answer.sql is not None:
            saved = await self.save(
                call.caller,
                database=call.alias,
                question=call.question,
                sql=answer.sql,
                evidence=call.given_evidence,
            )
            proposal = " ".join(c.text for c in saved.content if isinstance(c, TextContent))
        return with_choice(answer, reply.asked(form, proposal), group)

    @contextmanager
    def _admitted(self, caller: Caller, episodes: int) -> Iterator[None]:
        """Count `episodes` against the caller's minute, then hold the question's place in the gate
        (cancelled when the server's drain time runs out); refused past either."""
        try:
            self._state.quotas.check_rate(caller, episodes)
            with self._state.gate.admit() as stop_scope:
                with stop_scope:
                    yield
                    return
                raise server_stopped_answering()
        except QuotaExceeded as exc:
            raise Refused(str(exc), "quota") from exc
        except ServerStopping as exc:
            raise server_stopping() from exc

    @asynccontextmanager
    async def _recorded(
        self, call: Call, played: list[Round], why: Callable[[], str] = lambda: "call_cancelled"
    ) -> AsyncIterator[None]:
        """Answering the call: a question the block does not answer (cancelled, refused, failed) is
        recorded, then its error raised as the caller must see it. `played` collects every round of
        every sample as it ends; `why()` names a cancel (audit.CANCELLED)."""
        self.records.describe(call)
        started = time.perf_counter()
        try:
            yield
        except anyio.get_cancelled_exc_class():
            # Cancelled (the client's cancel, the question expired, the server stops): still one line.
            await self.records.cancelled(call, why(), activity(played, started))
            raise
        except Refused as refused:
            await self.records.refused(call, refused)
            raise
        except Exception as exc:
            failure = edge_error(
                exc, database=call.alias, remote=call.caller.remote, question_id=call.question_id
            )
            await self.records.unanswered(
                call,
                failure_outcome(failure, exc),
                detail(exc, call.alias),
                activity(played, started),
                error=exc,
            )
            if failure is None or failure is exc:  # None: our own bug, on stdio: it propagates as it is
                raise
            raise failure from exc

    async def _respond(self, call: Call, answered: Answered) -> CallToolResult:
        """The answer's response, recorded."""
        limits = self._state.limits
        if small_answer(answered.answer):  # built at once: a thread hand-off costs more than building it
            response = fitted_response(answered.answer, limits)
        else:  # built in a worker thread: other clients' requests go on being served meanwhile
            response = await anyio.to_thread.run_sync(lambda: fitted_response(answered.answer, limits))
        await self.records.answered(call, answered, response)
        return response if answered.meta is None else response.model_copy(update={"meta": answered.meta})
