"""Asking the person to choose when a question's samples disagree, in both protocol eras.

Who is asked: a client that declared form elicitation (in its 2025-11-25 `initialize`, or in
each 2026-07-28 request's `_meta`), on a server whose --ask-to-choose is not off, when
agent.choices says so (K >= 2 samples whose results differ; `always`: any result). Every
other call is answered exactly as before asking existed.

- 2025-11-25: the call sends the form (`elicitation/create`) and waits up to --ask-timeout.
- 2026-07-28: the call ends with an `input_required` result holding the same form and the
  request state (choice_form.ChoiceState, sealed by the SDK); the client calls again with the
  reply, on any server process holding the same --request-state-key-env key. The chosen
  option's SQL then runs again (agent.sql_answer, under the hide rules); its trace and counts
  come from the state.

The chosen candidate becomes the answer (its SQL and rows, its own share of the votes as
`agreement`, `chosen_by: "user"`, first among the candidates). "None of these", a decline, a
cancel, no reply in time or one that does not fit the form leave the vote's answer, with
`chosen_by: "vote"`. Either way `asked` says what the person was shown and said. A caller
that may propose verified answers gets a checkbox to propose the chosen one (saving.save_answer:
a proposal, never served until the library's owner accepts it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.server.apps import client_supports_apps
from mcp.server.mcpserver import Context
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitResult, TextContent
from mcp_types.version import is_version_at_least

from agent.choices import AskMode, Choice, choice_of, sources_of
from agent.episode import EpisodeStatus, StopReason
from agent.sampling import SampledAnswer, SampleRun
from agent.sql_answer import answer_from_sql

from ..config.server_settings import ServerSettings
from ..state import ServerState
from .choice_form import ChoiceForm, ChoiceState, OptionRecord, PersonReply, answers_forms
from .output import AnswerOutput, AskedPerson, answer_from_episode
from .sampling import QuestionCall
from .saving import may_save, save_answer

INPUT_REQUIRED_VERSION = "2026-07-28"  # the first protocol version that asks through `input_required`
STATE_TRACE_ARG_CHARS = 200  # a trace argument as the request state keeps it (as a shrunk answer does)
STATE_MAX_CHARS = 262_144  # past this the state drops the options' traces (the SDK caps a request at 4 MB)

SendForm = Callable[[str, dict[str, Any]], Awaitable[ElicitResult]]


@dataclass(frozen=True)
class PersonAsker:
    """How this call may ask its person: a form in the call (2025-11-25) or through a retry
    (2026-07-28); or, for an MCP Apps host that answers no form, the answer view's choice."""

    mode: AskMode
    timeout: float
    send: SendForm | None = None  # 2025-11-25: sends the form and waits for the reply
    by_form: bool = True  # False: the answer view offers the choice (view_choice.py); nothing is sent

    @property
    def in_call(self) -> bool:
        """True when the form is sent in the call (2025-11-25)."""
        return self.send is not None


def person_asker(ctx: Context[Any, Any], settings: ServerSettings) -> PersonAsker | None:
    """Whether and how this call's client lets the server ask its person; None: it does not."""
    if settings.ask_to_choose is AskMode.OFF:
        return None
    if not answers_forms(ctx.client_capabilities):
        apps = settings.answer_view and client_supports_apps(ctx)
        return PersonAsker(settings.ask_to_choose, settings.ask_timeout, by_form=False) if apps else None
    version = ctx.protocol_version
    if version is not None and is_version_at_least(version, INPUT_REQUIRED_VERSION):
        return PersonAsker(settings.ask_to_choose, settings.ask_timeout)
    session = ctx.session
    if not session.can_send_request:  # no channel for a server-to-client request
        return None
    request_id = ctx.request_id

    async def send(message: str, schema: dict[str, Any]) -> ElicitResult:
        return await session.elicit_form(message, schema, related_request_id=request_id)

    return PersonAsker(settings.ask_to_choose, settings.ask_timeout, send)


def may_propose(server_state: ServerState, call: QuestionCall) -> bool:
    """True when the form may offer to propose the chosen answer as verified (saving.may_save)."""
    return call.alias in server_state.verified and may_save(server_state.settings, call.caller)


def choice_for(asked: SampledAnswer, question: str) -> Choice:
    """The options for this vote (agent.choices)."""
    return choice_of(question, sources_of(asked), asked.samples)


async def ask_in_call(asker: PersonAsker, form: ChoiceForm) -> PersonReply:
    """2025-11-25: send the form and read the reply; `no_reply` after the asker's timeout."""
    assert asker.send is not None
    with anyio.move_on_after(asker.timeout):
        try:
            result = await asker.send(form.choice.message, form.schema)
        except MCPError:  # the client answered the form with an error of its own
            return PersonReply("invalid_reply")
        return form.read(result)
    return PersonReply("no_reply")


def with_choice(answer: AnswerOutput, asked: AskedPerson, group: int | None) -> AnswerOutput:
    """`answer` (an option's, with the vote's fields) as the person's (`group`) or the vote's (None)."""
    if group is None:
        return answer.model_copy(update={"chosen_by": "vote", "asked": asked})
    chosen = answer.candidates[group]
    rest = [c for k, c in enumerate(answer.candidates) if k != group]
    return answer.model_copy(update={"chosen_by": "user", "asked": asked, "candidates": [chosen, *rest],
                                     "agreement": round(chosen.votes / answer.samples, 3)})


async def settled(server_state: ServerState, call: QuestionCall, form: ChoiceForm, reply: PersonReply,
                  answer: AnswerOutput) -> AnswerOutput:
    """The answer the reply makes of `answer` (the chosen option's, or the vote's), with the
    proposal the person asked for filed."""
    group = reply.group if reply.reply == "chose" else None
    proposal = None
    if reply.propose and group is not None and form.propose and answer.sql is not None:
        saved = await save_answer(server_state, call.caller, database=call.alias, question=call.question,
                                  sql=answer.sql, evidence=call.given_evidence)
        proposal = " ".join(c.text for c in saved.content if isinstance(c, TextContent))
    return with_choice(answer, reply.asked(form, proposal), group)


def option_record(group: int, run: SampleRun, answer: AnswerOutput) -> OptionRecord:
    """What the request state keeps of one option's answer (its trace arguments clipped)."""
    assert answer.sql is not None
    trace = [entry.model_copy(update={"arguments": {
        k: v[:STATE_TRACE_ARG_CHARS] if isinstance(v, str) else v for k, v in entry.arguments.items()}})
        for entry in answer.trace]
    return OptionRecord(group=group, sql=answer.sql, status=answer.status, stop_reason=answer.stop_reason,
                        rounds=answer.rounds, tool_calls=answer.tool_calls, tokens=answer.tokens,
                        seconds=answer.seconds, queued_seconds=round(run.queued_seconds, 3), trace=trace,
                        trace_omitted=answer.trace_omitted, prompt_cache=answer.prompt_cache)


def choice_state(question_id: str, asked_at: float, form: ChoiceForm, records: list[OptionRecord],
                 vote_answer: AnswerOutput, evidence: str | None,
                 max_chars: int = STATE_MAX_CHARS) -> ChoiceState:
    """The state of a question awaiting its person's choice (traces dropped past `max_chars`)."""
    state = ChoiceState(
        question_id=question_id, asked_at=asked_at, alias=vote_answer.database or "",
        question=vote_answer.question, evidence=evidence, model=vote_answer.model,
        labels=[o.label for o in form.choice.options], more=form.choice.more, propose=form.propose,
        options=records, samples=vote_answer.samples, samples_finished=vote_answer.samples_finished,
        candidates=vote_answer.candidates, similar_verified=vote_answer.similar_verified,
        verified_note=vote_answer.verified_note)
    if len(state.encode()) <= max_chars:
        return state
    lighter = [r.model_copy(update={"trace": [], "trace_omitted": r.trace_omitted + len(r.trace)})
               for r in records]
    return state.model_copy(update={"options": lighter})


async def answer_from_state(server_state: ServerState, state: ChoiceState, group: int | None) -> AnswerOutput:
    """The answer of option `group` (None: the vote's) from a retry's state: its SQL run again now."""
    record = next(r for r in state.options if r.group == (group or 0))
    result, _ = await answer_from_sql(
        record.sql, server_state.databases[state.alias], server_state.episode_settings, question=state.question,
        evidence=None, status=EpisodeStatus(record.status), stop_reason=StopReason(record.stop_reason))
    built = await anyio.to_thread.run_sync(lambda: answer_from_episode(
        result, database=state.alias, model=state.model, max_rows=server_state.settings.max_rows,
        queued_seconds=record.queued_seconds))
    return built.model_copy(update={
        "rounds": record.rounds, "tool_calls": record.tool_calls, "tokens": record.tokens,
        "seconds": record.seconds, "trace": record.trace, "trace_omitted": record.trace_omitted,
        "prompt_cache": record.prompt_cache, "samples": state.samples,
        "samples_finished": state.samples_finished, "candidates": state.candidates,
        "agreement": round(state.candidates[0].votes / state.samples, 3),
        "similar_verified": state.similar_verified, "verified_note": state.verified_note})
