"""Asking the person to choose when a question's samples disagree: one interface, `Asker`, three ways.

Who is asked: a client that declared form elicitation (in its 2025-11-25 `initialize`, or in
each 2026-07-28 request's `_meta`), on a server whose --ask-to-choose is not off, when
agent.choices says so (K >= 2 samples whose results differ; `always`: any result); and an MCP Apps
host that answers no form, when the samples gave several results. Every other call is answered
exactly as before asking existed (`asker_for` gives it no Asker).

- `FormInCall` (2025-11-25): the form (`elicitation/create`) goes out through a call waiting on the
  question (ongoing.Ongoing.send_form) and the person's reply, within --ask-timeout, makes the answer.
- `FormByRetry` (2026-07-28): the call ends with an `input_required` result holding the same form and
  the request state (choice_form.ChoiceState, sealed by the SDK); the client calls again with the
  reply, on any server process holding the same --request-state-key-env key.
- `ViewChoice` (an MCP Apps host without forms): the vote's answer carries in its `_meta`
  (RESULT_META_KEY) the options and the state sealed for the caller's token; the answer view's
  "Use this answer" calls `choose_answer` with it.

A later reply (a retry's, the view's) runs the chosen option's SQL again (agent.sql_answer, under
the hide rules); its trace and counts come from the state. The chosen candidate becomes the answer
(its SQL and rows, its own share of the votes as `agreement`, `chosen_by: "user"`, first among the
candidates). "None of these", a decline, a cancel, no reply in time or one that does not fit the
form leave the vote's answer, with `chosen_by: "vote"`. Either way `asked` says what the person
was shown and said. On a form, a caller that may propose verified answers gets a checkbox to
propose the chosen one (verified.propose: a proposal, never served until the library's owner
accepts it).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import anyio
from mcp.server.apps import client_supports_apps
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError
from mcp_types import InputResponses
from mcp_types.version import is_version_at_least

from agent import (
    AskMode,
    Database,
    EpisodeSettings,
    EpisodeStatus,
    SampleRun,
    StopReason,
    answer_from_sql,
    should_ask,
)

from ..config.server_settings import ServerSettings
from ..ongoing import SendForm
from .audit import Answered, Awaiting, Call
from .choice_form import ChoiceForm, ChoiceState, OptionRecord, PersonReply, ViewTokens, answers_forms
from .output import RESULT_META_KEY, AnswerOutput, AskedPerson
from .samples import answer_from_episode

INPUT_REQUIRED_VERSION = "2026-07-28"  # the first protocol version that asks through `input_required`
STATE_TRACE_ARG_CHARS = 200  # a trace argument as the request state keeps it (as a shrunk answer does)
STATE_MAX_CHARS = 262_144  # past this the state drops the options' traces (the SDK caps a request at 4 MB)
VIEW_STATE_MAX_CHARS = 32_768  # past this the view's state drops the options' traces (it rides in _meta)

ReadReply = Callable[[ChoiceState, ChoiceForm], PersonReply]  # a later reply, read against its form


@dataclass(frozen=True)
class Disagreement:
    """The samples' results a person may choose among, as the question offers them to its Asker."""

    call: Call
    form: ChoiceForm
    runs: list[SampleRun]  # each result's earliest sample, in the vote's order (the form's groups)
    chosen: SampleRun  # the vote's
    voting: dict[str, Any]  # what the episode log says of the vote
    answer_of: Callable[[SampleRun], Awaitable[AnswerOutput]]  # a sample's answer, with the vote's fields
    settle: Callable[[ChoiceForm, PersonReply, AnswerOutput], Awaitable[AnswerOutput]]  # the reply's answer
    send_form: SendForm  # sends the form through a call waiting on the question, and waits for the reply

    async def state(self, max_chars: int) -> tuple[AnswerOutput, ChoiceState]:
        """The vote's answer, and the state of the question awaiting its person's later reply."""
        answer = await self.answer_of(self.chosen)
        records = [
            option_record(o.group, self.runs[o.group], await self.answer_of(self.runs[o.group]))
            for o in self.form.choice.options
        ]
        return answer, choice_state(
            self.call.question_id, time.time(), self.form, records, answer, self.call.given_evidence, max_chars
        )


class Asker(ABC):
    """One way a call may ask its person to choose among the samples' results."""

    kind: ClassVar[str]  # sets questions asked this way apart from others (ongoing.QuestionKey.asking)
    # A form: every sample runs to the end, --ask-samples is the default, a proposal may be offered.
    by_form: ClassVar[bool] = True
    send_form: SendForm | None = None  # 2025-11-25: how this call sends a form for the question it waits on

    def __init__(self, mode: AskMode, timeout: float) -> None:
        self.mode, self.timeout = mode, timeout

    def asks(self, samples: int, results: int) -> bool:
        """True when K = `samples` whose results form `results` groups call for asking this way."""
        return should_ask(self.mode, samples, results)

    @abstractmethod
    async def ask(self, disagreement: Disagreement) -> Answered | Awaiting:
        """The call's outcome, the person asked now or in a later call."""


class FormInCall(Asker):
    """2025-11-25: the form goes out now, and the reply makes the answer."""

    kind = "form"

    def __init__(self, mode: AskMode, timeout: float, send_form: SendForm) -> None:
        super().__init__(mode, timeout)
        self.send_form = send_form

    async def ask(self, disagreement: Disagreement) -> Answered:
        """The answer the person's reply makes (the vote's without one in time)."""
        d = disagreement
        reply = PersonReply("no_reply")
        with anyio.move_on_after(self.timeout):
            try:
                reply = d.form.read(await d.send_form(d.form.choice.message, d.form.schema))
            except MCPError:  # the client answered the form with an error of its own
                reply = PersonReply("invalid_reply")
        run = d.runs[reply.group] if reply.reply == "chose" and reply.group is not None else d.chosen
        answer = await d.settle(d.form, reply, await d.answer_of(run))
        assert run.result is not None
        return Answered(
            answer,
            run.result.model_seconds,
            run.result.tool_seconds,
            {**d.voting, "chosen_sample": run.index, "asked_person": asked_fields(answer)},
        )


class FormByRetry(Asker):
    """2026-07-28: the call ends asking for the form; the client's retry brings the reply."""

    kind = "retry"

    async def ask(self, disagreement: Disagreement) -> Awaiting:
        """The `input_required` result, with the state its retry brings back."""
        _, state = await disagreement.state(STATE_MAX_CHARS)
        return Awaiting(
            disagreement.form.input_required(state),
            {**disagreement.voting, "asked_person": {"options": disagreement.form.titles, "reply": "awaiting"}},
        )

    @staticmethod
    def reply(responses: InputResponses | None, timeout: float) -> ReadReply:
        """How a retry's reply is read: none (`no_reply`), too late, or the person's."""
        return lambda state, form: form.read_retry(responses, state.asked_at, timeout)


class ViewChoice(Asker):
    """An MCP Apps host without forms: the vote's answer offers the same choice in the answer view."""

    kind = "view"
    by_form = False

    def __init__(self, mode: AskMode, timeout: float, tokens: ViewTokens) -> None:
        super().__init__(mode, timeout)
        self.tokens = tokens

    def asks(self, samples: int, results: int) -> bool:
        """As a form would, when the samples gave several results to choose among."""
        return results >= 2 and super().asks(samples, results)

    async def ask(self, disagreement: Disagreement) -> Answered:
        """The vote's answer, its `_meta` offering the view's choice under a token only its caller opens."""
        d = disagreement
        answer, state = await d.state(VIEW_STATE_MAX_CHARS)
        voted = d.chosen.result
        assert voted is not None
        choice = {
            "options": [option.label for option in d.form.choice.options],
            "token": self.tokens.seal(state, d.call.caller),
        }
        return Answered(
            answer,
            voted.model_seconds,
            voted.tool_seconds,
            d.voting,
            meta={RESULT_META_KEY: {"choice": choice}},
        )

    @staticmethod
    def reply(option: int) -> ReadReply:
        """How the option the person picked in the view is read (a number past the options: invalid)."""

        def picked(_: ChoiceState, form: ChoiceForm) -> PersonReply:
            options = form.choice.options
            if option > len(options):
                return PersonReply("invalid_reply")
            return PersonReply("chose", options[option - 1].group, option)

        return picked


def asker_for(ctx: Context[Any, Any], settings: ServerSettings, tokens: ViewTokens) -> Asker | None:
    """How this call's client lets the server ask its person; None: it does not."""
    mode, timeout = settings.ask_to_choose, settings.ask_timeout
    if mode is AskMode.OFF:
        return None
    if not answers_forms(ctx.client_capabilities):
        apps = settings.answer_view and client_supports_apps(ctx)
        return ViewChoice(mode, timeout, tokens) if apps else None
    version = ctx.protocol_version
    if version is not None and is_version_at_least(version, INPUT_REQUIRED_VERSION):
        return FormByRetry(mode, timeout)
    session = ctx.session
    if not session.can_send_request:  # no channel for a server-to-client request
        return None
    request_id = ctx.request_id

    async def send(message: str, schema: dict[str, Any]) -> Any:
        return await session.elicit_form(message, schema, related_request_id=request_id)

    return FormInCall(mode, timeout, send)


def asked_fields(answer: AnswerOutput) -> dict[str, Any]:
    """What the episode log says of the person asked about `answer`."""
    return {} if answer.asked is None else answer.asked.model_dump(mode="json")


def with_choice(answer: AnswerOutput, asked: AskedPerson, group: int | None) -> AnswerOutput:
    """`answer` (an option's, with the vote's fields) as the person's (`group`) or the vote's (None)."""
    if group is None:
        return answer.model_copy(update={"chosen_by": "vote", "asked": asked})
    chosen = answer.candidates[group]
    rest = [c for k, c in enumerate(answer.candidates) if k != group]
    return answer.model_copy(
        update={
            "chosen_by": "user",
            "asked": asked,
            "candidates": [chosen, *rest],
            "agreement": round(chosen.votes / answer.samples, 3),
        }
    )


def option_record(group: int, run: SampleRun, answer: AnswerOutput) -> OptionRecord:
    """What the request state keeps of one option's answer (its trace arguments clipped)."""
    assert answer.sql is not None
    trace = [
        entry.model_copy(
            update={
                "arguments": {
                    k: v[:STATE_TRACE_ARG_CHARS] if isinstance(v, str) else v
                    for k, v in entry.arguments.items()
                }
            }
        )
        for entry in answer.trace
    ]
    return OptionRecord(
        group=group,
        sql=answer.sql,
        status=answer.status,
        stop_reason=answer.stop_reason,
        rounds=answer.rounds,
        tool_calls=answer.tool_calls,
        tokens=answer.tokens,
        seconds=answer.seconds,
        queued_seconds=round(run.queued_seconds, 3),
        trace=trace,
        trace_omitted=answer.trace_omitted,
        prompt_cache=answer.prompt_cache,
    )


def choice_state(
    question_id: str,
    asked_at: float,
    form: ChoiceForm,
    records: list[OptionRecord],
    vote_answer: AnswerOutput,
    evidence: str | None,
    max_chars: int = STATE_MAX_CHARS,
) -> ChoiceState:
    """The state of a question awaiting its person's choice (traces dropped past `max_chars`)."""
    state = ChoiceState(
        question_id=question_id,
        asked_at=asked_at,
        alias=vote_answer.database or "",
        question=vote_answer.question,
        evidence=evidence,
        model=vote_answer.model,
        labels=[o.label for o in form.choice.options],
        more=form.choice.more,
        propose=form.propose,
        options=records,
        samples=vote_answer.samples,
        samples_finished=vote_answer.samples_finished,
        candidates=vote_answer.candidates,
        similar_verified=vote_answer.similar_verified,
        verified_note=vote_answer.verified_note,
    )
    if len(state.encode()) <= max_chars:
        return state
    lighter = [
        r.model_copy(update={"trace": [], "trace_omitted": r.trace_omitted + len(r.trace)}) for r in records
    ]
    return state.model_copy(update={"options": lighter})


async def answer_from_state(
    state: ChoiceState, group: int | None, database: Database, settings: EpisodeSettings, max_rows: int
) -> AnswerOutput:
    """The answer of option `group` (None: the vote's) from a later reply's state: its SQL run again now."""
    record = next(r for r in state.options if r.group == (group or 0))
    result, _ = await answer_from_sql(
        record.sql,
        database,
        settings,
        question=state.question,
        evidence=None,
        status=EpisodeStatus(record.status),
        stop_reason=StopReason(record.stop_reason),
    )
    built = await anyio.to_thread.run_sync(
        lambda: answer_from_episode(
            result,
            database=state.alias,
            model=state.model,
            max_rows=max_rows,
            queued_seconds=record.queued_seconds,
        )
    )
    return built.model_copy(
        update={
            "rounds": record.rounds,
            "tool_calls": record.tool_calls,
            "tokens": record.tokens,
            "seconds": record.seconds,
            "trace": record.trace,
            "trace_omitted": record.trace_omitted,
            "prompt_cache": record.prompt_cache,
            "samples": state.samples,
            "samples_finished": state.samples_finished,
            "candidates": state.candidates,
            "agreement": round(state.candidates[0].votes / state.samples, 3),
            "similar_verified": state.similar_verified,
            "verified_note": state.verified_note,
        }
    )
