"""What an answer says about the person it asked to choose among the samples' results (pure)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from agent.text import plural

ChosenBy = Literal["vote", "user"]
Reply = Literal["chose", "none_of_these", "declined", "cancelled", "no_reply", "late_reply", "invalid_reply"]


class AskedPerson(BaseModel):
    """The form the person was shown when the samples disagreed, and what they answered."""

    options: list[str] = Field(description=(
        "the options shown, in order: each distinct result in brief, its votes and what sets its SQL "
        "apart (written from the database and the model's SQL), then 'None of these'"))
    reply: Reply = Field(description=(
        "chose: an option became the answer; none_of_these, declined, cancelled: the vote's answer stands; "
        "no_reply: nothing within the server's --ask-timeout; late_reply: the reply came after it; "
        "invalid_reply: the client's reply did not fit the form (or was an error)"))
    chosen: int | None = Field(None, description="the 1-based number of the option chosen; null unless `reply` "
                                                 "is chose")
    proposal: str | None = Field(None, description=(
        "when the person also asked to propose the chosen answer as the team's verified answer: what the "
        "server says of the proposal (never served until the library's owner accepts it); null otherwise"))


_SAID = {"none_of_these": "answered that none of them is right",
         "declined": "declined to choose", "cancelled": "cancelled the form",
         "no_reply": "did not answer in time", "late_reply": "answered after the time allowed",
         "invalid_reply": "gave no reply that fits the form"}


def asked_line(asked: AskedPerson) -> str:
    """One line on the form: how many answers, what the person said, whose answer this is."""
    offered = len(asked.options) - 1  # the last option is "None of these"
    among = f"among {plural(offered, 'answer')}" if offered != 1 else "whether the answer is right"
    if asked.reply == "chose" and asked.chosen is not None:
        line = (f"The person was asked to choose {among} and chose option {asked.chosen}: this is their "
                "answer.")
    else:
        line = (f"The person was asked to choose {among} and {_SAID[asked.reply]}: this is the vote's "
                "answer.")
    if asked.proposal:
        line += f" Proposal: {asked.proposal}"
    return line
