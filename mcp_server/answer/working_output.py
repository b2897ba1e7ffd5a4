"""What an answer says when time is short: status `working` (the answer is not ready within the call's
budget, the question goes on) and an answer given early (`answered_early`: its samples answered with
what they had explored, as the model was trained to when its budget is spent)."""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, Field

from agent.episode import StopReason
from agent.sampling import SampledAnswer
from agent.text import plural

WORKING = "working"  # the status of a call that ended before its question was answered
CALL_BUDGET = "call_budget"  # its stop_reason: the call's time budget (--call-budget) ran out first
AWAITING_CHOICE = "awaiting_choice"  # ... while a form waited for the person's choice

EarlyReason = Literal["time_limit", "call_budget"]
EARLY_REASONS: dict[EarlyReason, str] = {
    "time_limit": "the question's time limit (--episode-timeout) was near",
    "call_budget": "the call's time budget was nearly up and this host asks for answers in one call",
}


class AnsweredEarly(BaseModel):
    """Present only when time ran short: the samples answered with what they had explored."""

    reason: EarlyReason = Field(description=(
        "time_limit: the question's own time limit was near; call_budget: the call's time budget was "
        "nearly up and the server gives one-call answers (--one-call-answers)"))
    samples_answered: int = Field(description="samples that gave an answer (the others were not started or "
                                              "ran out of time); the vote counts these")
    samples: int = Field(description="samples asked for (K)")
    rounds: int = Field(description="model rounds the answer's sample used")
    max_rounds: int = Field(description="model rounds a sample may use (its tool turns and the final turn)")


class Progress(Protocol):
    """What a `working` answer tells of its question so far (AnswerOutput's fields)."""

    samples: int
    samples_finished: int
    rounds: int
    seconds: float
    stop_reason: str


def answered_early(asked: SampledAnswer, told_to_finish: bool, max_rounds: int) -> AnsweredEarly | None:
    """Whether and how the question answered early; None when every sample ran its course."""
    runs = list(asked.outcome.results.values())
    early = [run for run in runs if run.result is not None and run.result.stop_reason is StopReason.TIME_UP]
    if not early and not any(run.skipped for run in runs):
        return None
    chosen = asked.chosen.result if asked.chosen is not None else None
    return AnsweredEarly(reason="call_budget" if told_to_finish else "time_limit",
                         samples_answered=sum(1 for run in runs if run.result is not None),
                         samples=asked.samples, rounds=len(chosen.rounds) if chosen is not None else 0,
                         max_rounds=max_rounds)


def early_line(early: AnsweredEarly) -> str:
    """One line: answered early, why, N of K samples, rounds used."""
    who = (f"{early.samples_answered} of {early.samples} samples answered with what they had explored"
           if early.samples > 1 else "the model answered with what it had explored")
    return (f"Answered early: {EARLY_REASONS[early.reason]}, so {who} (the answer used {early.rounds} of "
            f"{early.max_rounds} rounds). Check it with care.")


def working_text(answer: Progress) -> str:
    """The text of a `working` result: where the question stands, and to call again."""
    done = (f"{answer.samples_finished} of {answer.samples} samples done, " if answer.samples > 1 else "")
    where = f"{done}{plural(answer.rounds, 'model round')} so far, {answer.seconds:.0f} s since it was asked"
    if answer.stop_reason == AWAITING_CHOICE:
        now = ("The samples are done and a form asks the person to choose among their answers; the answer "
               "comes once they have chosen (or the choice times out).")
    else:
        now = "The answer is not ready yet; the question goes on being answered meanwhile."
    return (f"Still working on this question ({where}). {now} Call answer_sql_question again with exactly "
            "the same arguments to wait for the answer: nothing starts over and nothing is lost.")
