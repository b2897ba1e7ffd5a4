"""Shared by the tests of asking the person to choose: samples that disagree, and form replies.

The demo database's two questions, each answered by three samples (--seed 100: seeds 100,
101 and 102): two give the gold result, the third another one. A `FormReplies` callback answers
each form by the question its message quotes (never by call order).
Import as `from tests.support.choosing import ...`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
from mcp_types import ElicitRequestFormParams, ElicitResult

from tests.support.mcp import BOOK_GOLD, KeyedPolicy
from tests.support.policies import OraclePolicy, ScriptPolicy, SeedSwitchPolicy, assistant_reply, tool_call

BOOKS = "How many books are there?"
AUTHORS = "Which authors come from Nigeria?"
OLD_BOOKS = "SELECT count(*) FROM books WHERE published < 1960"  # seed 101's answer to BOOKS: 3, not 16
ALL_AUTHORS = "SELECT name FROM authors ORDER BY name"  # seed 101's answer to AUTHORS
SEED_FLAGS = ("--seed", "100", "--runtime-slots", "8", "--max-concurrent", "8")


def submits(sql: str) -> ScriptPolicy:
    """Lists the tables, then submits `sql`."""
    return ScriptPolicy(
        [
            assistant_reply("look", tool_call("list_tables")),
            assistant_reply("answer", tool_call("submit_sql", sql=sql)),
        ]
    )


def disagreeing_policy(wrong: Mapping[str, str] | None = None) -> SeedSwitchPolicy:
    """Seeds 100 and 102 answer like the oracle; seed 101 submits `wrong[question phrase]` (by default
    OLD_BOOKS for BOOKS and ALL_AUTHORS for AUTHORS)."""
    answers = dict(wrong or {"books": OLD_BOOKS, "authors": ALL_AUTHORS})
    oracle = OraclePolicy(BOOK_GOLD)
    odd = KeyedPolicy({**{phrase: submits(sql) for phrase, sql in answers.items()}, "": oracle})
    return SeedSwitchPolicy({100: oracle, 101: odd, 102: oracle})


def accept(answer: str, propose: bool | None = None) -> ElicitResult:
    """The person picks option `answer` ("1", "2", ... or "none"), proposing it or not."""
    content: dict[str, Any] = {"answer": answer}
    if propose is not None:
        content["propose"] = propose
    return ElicitResult(action="accept", content=content)


class FormReplies:
    """An elicitation callback: each form is answered with the reply for the question its message
    quotes (a phrase of it), after `delay` seconds; every form seen is kept."""

    def __init__(
        self, replies: Mapping[str, ElicitResult], *, delay: float = 0.0, both_open: anyio.Event | None = None
    ) -> None:
        self.replies = dict(replies)
        self.delay = delay
        self.seen: list[ElicitRequestFormParams] = []
        self._both_open = both_open  # set once two forms are open at the same time

    async def __call__(self, context: Any, params: Any) -> ElicitResult:
        """The reply for the first phrase of `replies` the form's message contains."""
        assert isinstance(params, ElicitRequestFormParams), params
        self.seen.append(params)
        if self._both_open is not None:
            if len(self.seen) >= 2:
                self._both_open.set()
            with anyio.fail_after(20):
                await self._both_open.wait()
        if self.delay:
            await anyio.sleep(self.delay)
        for phrase, reply in self.replies.items():
            if phrase in params.message:
                return reply
        raise LookupError(f"FormReplies: no reply for {params.message[:120]!r}")

    def options(self, k: int = -1) -> list[str]:
        """The titles of form k's answer options (the last form by default)."""
        return [o["title"] for o in self.seen[k].requested_schema["properties"]["answer"]["oneOf"]]
