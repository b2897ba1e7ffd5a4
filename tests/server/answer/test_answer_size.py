"""No answer is larger than the tool declares, counted as a JavaScript client counts it, whatever
the database holds (huge numbers, emoji, long names, many columns) and however the server is set."""

from __future__ import annotations

import json
import logging
import random
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from mcp_server.answer.output import AnswerOutput, Candidate, TraceEntry
from mcp_server.answer.sizing import (
    answer_chars,
    fitted_response,
    js_number_chars,
    json_chars,
    small_answer,
    text_chars,
)
from mcp_server.config.limits import (
    DEFAULT_ANSWER_CHARS,
    MAX_ANSWER_CHARS,
    MAX_ROWS_BYTES,
    RESULT_SIZE_META,
    AnswerLimits,
)
from tests.support.mcp import REPO, TOOL, server_command, server_env
from tests.support.mcp_in_process import build
from tests.support.node_tools import node_tool
from tests.support.policies import PolicyBackend, ScriptPolicy, assistant_reply, tool_call

ERAS = [pytest.param("legacy", id="2025-11-25"), pytest.param("auto", id="2026-07-28")]
MAX_FLAG = str(64 * 1024 * 1024)  # --max-result-bytes at its maximum


def test_text_and_json_are_counted_as_javascript_counts_them() -> None:
    """UTF-16 code units (an emoji is 2), floats as JSON.stringify writes them, strings that
    look like numbers left alone."""
    assert [text_chars(t) for t in ("abc", "é", "😀", "a😀b\n")] == [3, 1, 2, 5]
    numbers = (1.5e20, 1e16, 1e21, 1e-5, 1.5e-6, 1e-7, 12.0, -0.0, 0.1, -2.5e-300)
    assert [js_number_chars(x) for x in numbers] == [
        len("150000000000000000000"),
        17,
        len("1e+21"),
        len("0.00001"),
        len("0.0000015"),
        len("1e-7"),
        2,
        1,
        3,
        len("-2.5e-300"),
    ]
    value = {"big": [1.5e20, -1e17], "text": '1e+20 "1e+20" 😀', "small": 1e-5}
    javascript = (
        '{"big":[150000000000000000000,-100000000000000000],"text":"1e+20 \\"1e+20\\" 😀","small":0.00001}'
    )
    assert json_chars(value) == text_chars(javascript)


def test_numbers_are_counted_as_node_writes_them(tmp_path: Path) -> None:
    """Thousands of floats of every magnitude, and nested values with look-alike strings: each
    float's length is JSON.stringify's in Node, and no value is counted shorter than Node writes it."""
    node = node_tool("node", "node@22")
    rng = random.Random(32)
    floats = [rng.choice([-1, 1]) * rng.random() * 10 ** rng.randint(-30, 30) for _ in range(2_000)]
    floats += [struct.unpack("d", rng.randbytes(8))[0] for _ in range(1_000)]
    floats = [x for x in floats if x == x and abs(x) != float("inf")]
    values: list[Any] = [[x, f"{x!r}", {'k"': x}, "😀"] for x in floats[:300]]
    script = (
        "const [floats, values] = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "console.log(JSON.stringify([floats.map(x => JSON.stringify(x).length),"
        "values.map(v => JSON.stringify(v).length)]));"
    )
    done = subprocess.run(
        [str(node), "-e", script],
        input=json.dumps([floats, values]),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    float_lengths, value_lengths = json.loads(done.stdout)
    assert [js_number_chars(x) for x in floats] == float_lengths
    assert all(json_chars(v) >= n for v, n in zip(values, value_lengths, strict=True))


def hostile(kind: str) -> AnswerOutput:
    """An answer holding what a hostile database, a chatty model or many samples can put in one."""
    values: dict[str, Any] = dict(
        database="d",
        question="q" * 2_000,
        sql="SELECT 1",
        columns=["a"],
        rows=[[1]],
        row_count=1,
        truncated=False,
        note=None,
        status="submitted",
        error=None,
        stop_reason="submit_sql",
        rounds=6,
        tool_calls=1,
        tokens=1,
        seconds=1.0,
        model="m",
        trace=[],
    )
    if kind == "huge numbers":  # 1.5e+20 in Python is 21 characters in JavaScript
        values.update(
            columns=[f"c{i}" for i in range(20)],
            row_count=10_000,
            rows=[[(r + 1) * 1.5e20 * (-1) ** c for c in range(20)] for r in range(2_500)],
        )
    elif kind == "emoji":
        values.update(columns=["t", "u"], rows=[["😀" * 10_000, "🦆" * 200] for _ in range(50)], row_count=50)
    elif kind == "many long names":  # the worker keeps a column whose name alone passes the budget
        values.update(
            columns=["n" * 1_000 + str(i) for i in range(2_000)],
            rows=[[1.0] * 2_000],
            tables=["t" * 10_000 + str(i) for i in range(60)],
            columns_read={"t" * 10_000: ["c" * 1_000 + str(i) for i in range(2_000)]},
        )
    elif kind == "many samples":  # 64 samples that all disagree, a long SQL, a long trace
        values.update(
            samples=64,
            samples_finished=64,
            agreement=1 / 64,
            sql="SELECT " + "column_name, " * 8_000 + "1",
            candidates=[
                Candidate(sql=f"SELECT {k}, " + "x, " * 2_000 + "1", votes=1, row_count=1, status="submitted")
                for k in range(64)
            ],
            trace=[
                TraceEntry(
                    round=1, tool="run_query", arguments={"sql": "y" * 2_000}, ok=True, summary="s" * 160
                )
                for _ in range(48)
            ],
        )
    elif kind == "everything":
        for other in ("huge numbers", "many long names", "many samples"):
            dumped = hostile(other).model_dump()
            values.update({k: v for k, v in dumped.items() if k not in ("rows", "columns")})
        values.update(columns=[f"c{i}" for i in range(20)], rows=hostile("huge numbers").rows)
    return AnswerOutput(**values)


KINDS = ["huge numbers", "emoji", "many long names", "many samples", "everything"]
LIMITS = {
    "default": AnswerLimits(max_rows=50, cell_chars=10_000, query_timeout=10, episode_timeout=300),
    "raised": AnswerLimits(
        max_rows=10_000, cell_chars=10_000, query_timeout=10, episode_timeout=300, max_result_bytes=262_144
    ),
    "at most": AnswerLimits(
        max_rows=10_000,
        cell_chars=10_000,
        query_timeout=10,
        episode_timeout=300,
        max_result_bytes=MAX_ROWS_BYTES,
    ),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("limits", list(LIMITS.values()), ids=list(LIMITS))
def test_no_answer_exceeds_its_budget_whatever_it_holds(kind: str, limits: AnswerLimits) -> None:
    """Each hostile answer, under the default, a raised and the largest budget, fits the budget
    (the figure declared), stays a valid answer, and says what was cut."""
    answer = hostile(kind)
    result = fitted_response(answer, limits)
    fitted = AnswerOutput.model_validate(result.structured_content)
    size = answer_chars(result.content[0].text, result.structured_content)
    assert size <= limits.answer_chars, (kind, size)
    if len(fitted.rows) < len(answer.rows) or fitted.sql != answer.sql:
        assert fitted.truncated and "result_bytes" in fitted.limits_hit and fitted.note, fitted.note
    if fitted.sql != answer.sql:  # the very last cut: said in the note
        assert fitted.note is not None and "does not run as it stands" in fitted.note


def test_only_small_answers_are_built_on_the_event_loop() -> None:
    """A verified hit's size of answer is built at once; each hostile answer (many cells, long
    cells, a long question, many samples, a long trace) goes to a thread."""
    small = hostile("emoji").model_copy(update={"rows": [["Rock", 1]] * 5, "question": "q"})
    assert small_answer(small)
    assert [small_answer(hostile(kind)) for kind in KINDS] == [False] * len(KINDS)
    assert not small_answer(small.model_copy(update={"question": "q" * 9_000}))
    assert not small_answer(small.model_copy(update={"rows": [["😀" * 2_000, 1]] * 5}))
    assert not small_answer(small.model_copy(update={"trace": hostile("many samples").trace}))


def test_an_answer_that_fits_is_sent_whole() -> None:
    """Nothing is cut from an answer within its budget: the same structured content as the model's dump."""
    answer = hostile("emoji").model_copy(update={"rows": [["😀" * 100, "x"]] * 5, "question": "q"})
    result = fitted_response(answer, LIMITS["default"])
    assert result.structured_content == answer.model_dump(mode="json")


def test_start_up_says_what_a_client_takes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The default says nothing; a raised --max-result-bytes says the size declared; one past
    what an answer carries is a warning naming the cap and the rows' budget."""
    said = {}
    for flags in ([], ["--max-result-bytes", "262144"], ["--max-result-bytes", "10000000"]):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="mcp_server"):
            build(tmp_path, ["--demo", *flags], PolicyBackend(ScriptPolicy(["x"])))
        said[" ".join(flags)] = [
            (r.levelname, r.getMessage()) for r in caplog.records if "--max-result-bytes" in r.getMessage()
        ]
    assert said[""] == []
    assert said["--max-result-bytes 262144"] == [
        (
            "INFO",
            (
                "--max-result-bytes 262,144: the tool declares answers of up to 285,760 characters (_meta "
                "anthropic/maxResultSizeChars), which Claude Code keeps in the conversation; a client that "
                "does not read it may cut or set aside answers past its own limit (Claude Code's is 50,000 "
                "characters)"
            ),
        )
    ]
    assert said["--max-result-bytes 10000000"] == [
        (
            "WARNING",
            (
                f"--max-result-bytes 10,000,000 is more than one answer carries: an answer's rows are cut "
                f"to {MAX_ROWS_BYTES:,} bytes of JSON (give at most that to silence this warning), so that "
                "the whole answer stays within 500,000 characters, the most the tool may declare (_meta "
                "anthropic/maxResultSizeChars), which Claude Code keeps in the conversation; a client that "
                "does not read it may cut or set aside answers past its own limit (Claude Code's is 50,000 "
                "characters)"
            ),
        )
    ]


# A result a hostile database makes: 10,000 rows of numbers Python writes in 5 characters (`3e+20`)
# and JavaScript in 21, of small ones (`1e-05`, `0.00001`), and of emoji (one character, 2 in JavaScript).
HOSTILE_SQL = (
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 10000) SELECT "
    + ", ".join(f"((n + {k}) % 9 + 1) * 1e20 AS big{k}" for k in range(14))
    + ", (n % 9 + 1) * 1e-5 AS small, replace(hex(zeroblob(8)), '00', '😀') AS smile FROM r"
)


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_the_declared_size_holds_over_the_wire(tmp_path: Path, fake_ollama: Any, mode: str) -> None:
    """--max-result-bytes at its maximum, --max-rows 10000, in each era over stdio: the tool
    declares 500,000 characters and the answer received is within them (rows cut, and said)."""
    fake = fake_ollama(ScriptPolicy([assistant_reply("answer", tool_call("submit_sql", sql=HOSTILE_SQL))]))
    command = server_command(
        "--demo", "--ollama-host", fake.url, "--max-result-bytes", MAX_FLAG, "--max-rows", "10000"
    )
    params = StdioServerParameters(command=command[0], args=command[1:], env=server_env(tmp_path), cwd=REPO)
    async with Client(params, mode=mode) as client:
        (tool,) = (await client.list_tools()).tools
        result = await client.call_tool(TOOL, {"question": "Everything?"})
    assert (tool.meta or {}).get(RESULT_SIZE_META) == MAX_ANSWER_CHARS
    assert result.structured_content is not None and not result.is_error
    size = answer_chars(result.content[0].text, result.structured_content)
    answer = AnswerOutput.model_validate(result.structured_content)
    assert DEFAULT_ANSWER_CHARS < size <= MAX_ANSWER_CHARS, size
    assert answer.truncated and "result_bytes" in answer.limits_hit and 0 < len(answer.rows) < 10_000
    assert answer.note is not None and "cut to fit 500,000 characters" in answer.note
