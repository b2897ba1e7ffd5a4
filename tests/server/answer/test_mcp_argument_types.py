"""An argument of the wrong type gets one line naming it and what it accepts, as the hand-written
argument errors do: nothing of pydantic's (the input echoed, its model's name, its URL), in the
text and the structured content alike (issue 31, §5). Over HTTP in both eras: test_mcp_eras."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from agent.sqlite import create_database
from mcp_server.answer.tool_errors import wrong_arguments
from tests.support.mcp import TOOL
from tests.support.mcp_in_process import build, error_text
from tests.support.policies import PolicyBackend, ScriptPolicy, assistant_reply, tool_call

SECRET = "SECRET-ARGUMENT-VALUE"
QUESTION = "text: the question in plain language"
SAMPLES = "a whole number from 1 to 8, or null for the server's default"
MISTYPED = {
    "question as a number": ({"question": 5}, f"`question` must be {QUESTION}, not a number."),
    "question as null": ({"question": None}, f"`question` must be {QUESTION}, not null."),
    "no question": ({"database": "shop"}, f"`question` is missing; pass {QUESTION}."),
    "samples as text": ({"question": "q", "samples": SECRET}, f"`samples` must be {SAMPLES}, not text."),
    "samples with a fraction": (
        {"question": "q", "samples": 2.5},
        f"`samples` must be {SAMPLES}, not a number with a fraction.",
    ),
    "verified as a list": (
        {"question": "q", "verified": [SECRET]},
        "`verified` must be true or false, or null, not a list.",
    ),
    "database as an object": (
        {"question": "q", "database": {"name": SECRET}},
        "`database` must be text: the alias of a configured database (listed in the "
        "tool description), or null, not an object.",
    ),
    "two at once, one taken as it is": (
        {"question": [SECRET], "evidence": 7, "samples": "3"},
        f"`question` must be {QUESTION}, not a list; `evidence` must be text: hints about the data, or "
        "null, not a number.",
    ),
}


def calls(tmp_path: Path, arguments: list[dict[str, Any]]) -> list[Any]:
    """Each call's result on one in-process server (the stdio path)."""
    path = create_database(tmp_path / "shop.db", "CREATE TABLE t (x); INSERT INTO t VALUES (1);")
    policy = ScriptPolicy([assistant_reply("a", tool_call("submit_sql", sql="SELECT x FROM t"))])
    server = build(tmp_path, ["--db", f"shop={path}"], PolicyBackend(policy))

    async def run() -> list[Any]:
        async with Client(server) as client:
            return [await client.call_tool(TOOL, given) for given in arguments]

    return anyio.run(run)


def test_each_mistyped_argument_is_named_with_what_it_accepts(tmp_path: Path) -> None:
    """Missing, mistyped and several arguments at once: one line each call, the JSON kind of what
    was sent and never the value; a value the tool takes as it is ("3" for samples) is not blamed."""
    results = calls(tmp_path, [given for given, _ in MISTYPED.values()])
    for (_, expected), result in zip(MISTYPED.values(), results, strict=True):
        message = error_text(result)  # the structured content's `error` says the same
        assert message == expected
        assert result.structured_content["stop_reason"] == "invalid_arguments"
        text = result.content[0].text
        for internal in ("\n", SECRET, "pydantic", "input_value", "Arguments", "validation error", "http"):
            assert internal not in text and internal not in str(result.structured_content), (internal, text)


def test_a_well_typed_call_is_still_answered(tmp_path: Path) -> None:
    """Only the SDK's refusals are reworded: a good call (samples as "1" included) is answered."""
    (answered,) = calls(tmp_path, [{"question": "how many?", "samples": "1"}])
    assert not answered.is_error and answered.structured_content["rows"] == [[1]]


@pytest.mark.parametrize("max_samples", [3, 8])
def test_the_fallback_names_every_argument(max_samples: int) -> None:
    """When no single argument is at fault, the line says what each one takes."""
    assert str(wrong_arguments([], [], max_samples)) == (
        "the arguments do not match the tool's input schema: `question` takes text: the question in plain "
        "language; `database` takes text: the alias of a configured database (listed in the tool "
        f"description), or null; `evidence` takes text: hints about the data, or null; `samples` takes a "
        f"whole number from 1 to {max_samples}, or null for the server's default; `verified` takes true "
        "or false, or null."
    )
