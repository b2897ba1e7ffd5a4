"""Messages a user reads say what they mean: plurals, one full stop, rounded figures."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.errors import BackendUnreachable
from agent.text import sentence
from mcp_server.answer.answer_text import render_answer_text
from mcp_server.answer.output import AnswerOutput
from mcp_server.answer.samples import queued_message
from mcp_server.serving.draining import DrainResult, drain_summary
from tests.support.mcp import BOOK_GOLD
from tests.support.mcp_in_process import ask, build
from tests.support.policies import OraclePolicy, PolicyBackend

UNREACHABLE = str(
    BackendUnreachable(
        "Could not reach Ollama at http://127.0.0.1:9 (connection refused or host unknown). Start it with "
        "`ollama serve`, or give its address with --ollama-host or the OLLAMA_HOST environment variable."
    )
)


def test_a_sentence_ends_in_one_full_stop() -> None:
    """A message is made a sentence once: no `..` after one that had its own full stop."""
    assert [sentence(t) for t in ("done", "done.", "done. ", "why?")] == ["done.", "done.", "done.", "why?"]


def test_a_failed_answer_quotes_its_error_with_one_full_stop() -> None:
    """The tool's text for an answer without SQL: the error once, ending in one full stop."""
    answer = AnswerOutput(
        database="shop",
        question="q",
        sql=None,
        columns=[],
        rows=[],
        row_count=0,
        truncated=False,
        status="failed",
        error=UNREACHABLE,
        stop_reason="error",
        rounds=1,
        tool_calls=0,
        tokens=0,
        seconds=0.1,
        model="m",
        trace=[],
    )
    first = render_answer_text(answer).split("\n\n")[0]
    assert first == f'No runnable SQL was produced: "{UNREACHABLE}".'  # quoted: it may echo names
    assert ".." not in render_answer_text(answer)


def test_the_queue_line_counts_in_words() -> None:
    """A question queued behind --max-concurrent 1 reads `1 question is`, not `1 questions are`."""
    assert [queued_message(n) for n in (1, 4)] == [
        "queued: 1 question is being answered already (--max-concurrent)",
        "queued: 4 questions are being answered already (--max-concurrent)",
    ]


def test_the_drain_line_counts_in_words() -> None:
    """The drain's log line: 1 question was, 2 questions were."""
    assert [drain_summary(DrainResult(n, c)) for n, c in ((1, 0), (2, 1))] == [
        "drained: 1 question was in flight, 0 cancelled; stopping",
        "drained: 2 questions were in flight, 1 cancelled; stopping",
    ]


@pytest.mark.anyio
async def test_queued_seconds_are_rounded_like_seconds(tmp_path: Path) -> None:
    """queued_seconds is rounded to the millisecond (never 4.57e-05) in the structured answer."""
    server = build(tmp_path, ["--demo"], PolicyBackend(OraclePolicy(BOOK_GOLD)))
    result = await ask(server, {"question": "How many books are there?"})
    queued = result.structured_content["queued_seconds"]
    assert queued == round(queued, 3) and "e-" not in repr(queued)
