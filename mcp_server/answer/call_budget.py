"""A call's time budget (--call-budget): it answers when its question is answered, or ends saying
`working` before its host gives up, while the question goes on (mcp_server/ongoing.py) for the next
call of the same question.

- A call waits at most --call-budget seconds from its arrival (0: as long as it takes). Not answered
  by then, it returns status `working`: the progress so far and a text telling the assistant to call
  again with the same arguments; that call waits for the same question, asks nothing of the model again.
- With --one-call-answers, once the budget is nearly up (its last fifth, or twice the question's
  longest model request if more), the question is told to finish: its samples answer now with what
  they have (agent/sampling.py), and the call waits for that answer until its budget ends.
- A cancel of a call (notifications/cancelled, or its client gone) cancels the question when no other
  call waits on it. The budget has the server answer before a host's timer fires (Claude Desktop's
  60 s), so a cancel is a person's: the engine is freed at once (issue 46 §4). A host whose timer is
  shorter than the budget needs a smaller --call-budget (docs/clients.md).
- A 2025-11-25 form is sent from inside a waiting call and the person's reply outlives it: a call
  whose question waits on a form still ends within its budget (`working`, stop_reason awaiting_choice).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace

import anyio
from mcp_types import CallToolResult, TextContent

from agent.telemetry.gate import question_trace

from ..ongoing import Ongoing, QuestionKey, ReportProgress, TooManyWorking, Waiter
from ..state import ServerState
from .answer_text import working_text
from .audit import CallLog, Refused, activity, audit, record_refused, record_unanswered
from .choosing import PersonAsker
from .output import AWAITING_CHOICE, CALL_BUDGET, WORKING, AnswerOutput
from .sampling import QuestionCall
from .tool_errors import too_many_working

logger = logging.getLogger(__name__)

# With --one-call-answers, the end of the budget kept for the samples' final turns: at least this
# share of it, or this many times the question's longest model request.
FINAL_TURN_SHARE = 0.2
FINAL_TURN_REQUESTS = 2.0
# What a question's cancel is written down as, by why it was cancelled (ongoing.Ongoing.cancelled_why).
CANCELLED = {
    "call_cancelled": (("cancelled", "call_cancelled"), "the call was cancelled before it was answered"),
    "not_asked_again": (("expired", "not_asked_again"), "its call said working and no call of the same "
                        "question came back within --working-timeout, so it was stopped"),
    "server_stopped": (("cancelled", "server_stopped"), "the server stopped before it was answered"),
}


def question_key(call: QuestionCall, person: PersonAsker | None) -> QuestionKey:
    """What makes a later call the same question as this one (ongoing.QuestionKey)."""
    asking = ("none" if person is None else "view" if not person.by_form else "form" if person.in_call
              else "retry")
    return QuestionKey(token=call.caller.name, database=call.alias, question=call.question,
                       evidence=call.given_evidence, samples=call.samples, verified=call.use_verified,
                       asking=asking)


async def join_question(server_state: ServerState, call: QuestionCall, person: PersonAsker | None,
                        hint: str | None, run_for: Callable[[CallLog], Callable[[Ongoing], Awaitable[object]]],
                        ) -> tuple[Ongoing, CallLog]:
    """The question this call asks, with the log its lines go under: the one being answered under its
    key, or a new one `run_for(log)` runs. A new one past the token's --token-max-working is refused."""
    key = question_key(call, person)
    work = server_state.ongoing.find(key)
    if work is not None:  # the same question, already being answered: this call waits for it too
        question_trace().describe(database=call.alias, samples=call.samples, token=call.caller.name,
                                  question=call.question, evidence=call.given_evidence,
                                  hidden_names=server_state.databases[call.alias].all_hidden_names)
        return work, CallLog(work.question_id, call.caller.name)
    log = CallLog(uuid.uuid4().hex[:12], call.caller.name)

    async def expired(work: Ongoing) -> None:
        await record_expired(server_state, log, call, hint, work)

    try:
        return server_state.ongoing.start(key, log.question_id, run_for(log), expired), log
    except TooManyWorking as exc:
        refused = Refused(too_many_working(exc.token, exc.limit), "working")
        await record_refused(server_state, log, call, refused)
        raise refused from exc


def work_asker(person: PersonAsker | None, work: Ongoing) -> PersonAsker | None:
    """How the question asks its person: a 2025-11-25 form goes through a call waiting on it."""
    return person if person is None or not person.in_call else replace(person, send=work.send_form)


def waiter_of(report: ReportProgress, person: PersonAsker | None) -> Waiter:
    """The call as its question sees it: where its progress goes, and how it sends a form."""
    return Waiter(report, person.send if person is not None and person.in_call else None)


def cancel_outcome(work: Ongoing) -> tuple[tuple[str, str], str]:
    """The (status, reason) and the text a cancelled question's line says."""
    return CANCELLED[work.cancelled_why or "server_stopped"]


async def wait_for_answer(server_state: ServerState, work: Ongoing, waiter: Waiter, arrived: float) -> bool:
    """Wait on `work` for this call's budget; True once it is done, False when the budget ran out.

    Cancelled (the client's cancel, or its session's end), the call cancels the question unless
    another call waits on it, and the cancellation goes on.
    """
    settings = server_state.settings
    number: int | None = None
    try:
        await work.greet(waiter)  # before it hears the question's next progress, which is higher
        number = work.attach(waiter)
        if settings.call_budget <= 0:
            await work.done.wait()
            return True
        deadline = arrived + settings.call_budget
        if settings.one_call_answers:
            while not work.done.is_set() and not work.finish_now.is_set():
                reserve = max(FINAL_TURN_SHARE * settings.call_budget,
                              FINAL_TURN_REQUESTS * work.longest_request())
                left = deadline - reserve - time.perf_counter()
                if left <= 0:
                    work.finish_now.set()  # the samples answer now, with what they have
                    break
                with anyio.move_on_after(left):
                    await work.changed()
        with anyio.move_on_after(deadline - time.perf_counter()):
            await work.done.wait()
        return work.done.is_set()
    except anyio.get_cancelled_exc_class():
        if number is not None:
            work.detach(number)
        if not work.waiters:
            server_state.ongoing.cancel(work, "call_cancelled")
        question_trace().finish(*CANCELLED["call_cancelled"][0])  # this call's span, ended here
        raise
    finally:
        if number is not None:
            work.detach(number)


def working_answer(server_state: ServerState, work: Ongoing, call: QuestionCall) -> AnswerOutput:
    """The structured result of a call that ends before its question is answered."""
    return AnswerOutput(
        database=call.alias, question=call.question, sql=None, columns=[], rows=[], row_count=0,
        truncated=False, note=None, status="working", error=None,
        stop_reason=AWAITING_CHOICE if work.asking else CALL_BUDGET, rounds=len(work.rounds),
        tool_calls=sum(len(r.calls) for r in work.rounds), tokens=0, seconds=round(work.seconds, 3),
        queued_seconds=0.0, model=server_state.model_label, trace=[], agreement=None, samples=call.samples,
        samples_finished=work.samples_finished, last_reply=None)


async def working_response(server_state: ServerState, work: Ongoing, call: QuestionCall, log: CallLog,
                           hint: str | None) -> CallToolResult:
    """The `working` result, recorded: a metric, the call's span, an episode-log line, a log line."""
    answer = working_answer(server_state, work, call)
    server_state.metrics.working_calls.labels(call.alias, call.caller.name).inc()
    question_trace().finish(WORKING, answer.stop_reason)
    await audit(server_state, log, call.question, hint, call.alias, {
        "status": WORKING, "stop_reason": answer.stop_reason, "call": work.calls, "rounds": answer.rounds,
        "tool_calls": answer.tool_calls, "samples_finished": answer.samples_finished,
        "seconds": answer.seconds})
    logger.info("still working on '%s' for token '%s' after call %d: %d rounds, %.1f s; the question goes on",
                call.alias, call.caller.name, work.calls, answer.rounds, answer.seconds, extra=log.log_fields())
    return CallToolResult(content=[TextContent(type="text", text=working_text(answer))],
                          structured_content=answer.model_dump(mode="json"))


async def record_expired(server_state: ServerState, log: CallLog, call: QuestionCall, hint: str | None,
                         work: Ongoing) -> None:
    """The lines of a question answered while no call waited, whose answer no call came back for."""
    await record_unanswered(server_state, log, call, hint, ("expired", "not_asked_again"),
                            "it was answered, but no call of the same question came back for the answer "
                            "within --working-timeout", activity(work.rounds, work.started))
