"""Within every client's limits: a 2 KB description, answers under 10k tokens, structured errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import Client

from agent.notes import read_notes
from mcp_server.answer.output import AnswerOutput, Candidate, SimilarVerified, TraceEntry
from mcp_server.answer.sizing import DEFAULT_ANSWER_CHARS, answer_chars, fitted_response
from mcp_server.config.catalog import Catalog, CatalogEntry
from mcp_server.config.description import tool_description
from mcp_server.config.limits import RESULT_SIZE_META, AnswerLimits
from tests.support.mcp import TOOL
from tests.support.mcp_in_process import ask, build, error_text, valid_answer
from tests.support.policies import (
    PolicyBackend,
    ScriptedReply,
    ScriptPolicy,
    assistant_reply,
    tool_call,
)
from tests.support.sqlite_files import build_db

pytestmark = pytest.mark.anyio

LONG_NAME = "a_table_name_as_long_as_a_warehouse_schema_makes_them_x"  # cut to 40 in the description


def many_databases(tmp_path: Path, count: int) -> list[str]:
    """`count` databases of 9 long-named tables, each with notes and a hide rule: the flags."""
    argv = []
    for i in range(count):
        tables = "".join(f"CREATE TABLE {LONG_NAME}{t} (id INTEGER, secret TEXT);" for t in range(9))
        path = build_db(tmp_path / f"warehouse_{i:02d}.sqlite", tables)
        notes = tmp_path / f"notes_{i:02d}.txt"
        notes.write_text("status 'A' means active\nprices are in cents\n")
        argv += [
            "--db",
            f"warehouse_region_{i:02d}={path}",
            "--notes",
            f"warehouse_region_{i:02d}={notes}",
            "--hide",
            f"warehouse_region_{i:02d}=*.secret",
        ]
    return argv


@pytest.mark.parametrize("count", [1, 12, 50])
async def test_description_fits_2_kb_essentials_first(tmp_path: Path, count: int) -> None:
    """1, 12 or 50 databases with notes and hide rules: the description fits 2,048 bytes, the
    limits and the caveat come before the databases, and the enum still lists every alias."""
    server = build(
        tmp_path,
        ["--max-samples", "8", *many_databases(tmp_path, count)],
        PolicyBackend(ScriptPolicy(["unused"])),
    )
    async with Client(server) as client:
        (tool,) = (await client.list_tools()).tools
    description = tool.description or ""
    assert len(description.encode()) <= 2_048, len(description.encode())
    listing = description.index("\nDatabase")
    for essential in (
        "small local text-to-SQL model",
        "check that it answers the question",
        "Limits: an answer holds at most 50 rows",
        "`samples` above 1",
        "has notes` comes",
    ):
        assert description.index(essential) < listing, essential
    aliases = [f"warehouse_region_{i:02d}" for i in range(count)]
    assert tool.input_schema["properties"]["database"]["enum"] == aliases
    shown = [a for a in aliases if f"- {a}: 9 tables" in description]
    if len(shown) < count:
        assert description.endswith(
            f"- and {count - len(shown)} more: every alias is listed in the `database` enum"
        )
    assert shown == aliases[: len(shown)] and len(shown) >= min(count, 12)
    print(f"\n{count} databases: description {len(description):,} characters, {len(shown)} listed")


def test_description_fits_with_hostile_sizes(tmp_path: Path) -> None:
    """64-character aliases, 100 long table names each, notes, a 500-character model name: 2 KB."""
    (tmp_path / "notes.txt").write_text("\n".join(f"fact {i}: " + "n" * 200 for i in range(20)))
    notes = read_notes(tmp_path / "notes.txt", max_chars=100_000, where="test")
    for count in (1, 2, 12, 50, 500):
        tables = tuple(f"{'t' * 300}{j}" for j in range(100))
        entries = tuple(
            CatalogEntry(f"{'x' * 60}{i:04d}", Path("/d"), tables, ("v" * 300,), notes=notes)
            for i in range(count)
        )
        text = tool_description(
            Catalog(entries),
            model="m" * 500,
            limits=AnswerLimits(
                max_rows=10_000,
                cell_chars=100_000,
                query_timeout=3_600,
                episode_timeout=86_400,
                max_result_bytes=64 * 1024 * 1024,
            ),
            max_samples=64,
        )
        assert len(text.encode()) <= 2_048, (count, len(text.encode()))
        assert "Limits:" in text and "x" * 60 in text


def long_answer(**changes: Any) -> AnswerOutput:
    """An answer as large as the model and the worker can make it with the default limits."""
    sql = "SELECT " + ", ".join(f"c{i}" for i in range(1_500)) + " FROM wide"  # ~8,000 characters
    values: dict[str, Any] = dict(
        database="shop",
        question="q" * 2_000,
        sql=sql,
        columns=[f"c{i}" for i in range(60)],
        rows=[["x" * 250 for _ in range(60)] for _ in range(1)],
        row_count=50,
        truncated=True,
        note="the result was cut to fit 16,384 bytes",
        status="submitted",
        error=None,
        stop_reason="submit_sql",
        rounds=6,
        tool_calls=48,
        tokens=12_288,
        seconds=30.0,
        model="m",
        tables=[f"t{i}" for i in range(40)],
        columns_read={"wide": [f"c{i}" for i in range(1_500)]},
        agreement=0.25,
        samples=8,
        samples_finished=8,
        candidates=[Candidate(sql=sql + str(k), votes=1, row_count=50, status="submitted") for k in range(8)],
        trace=[
            TraceEntry(
                round=1 + k // 8, tool="run_query", arguments={"sql": sql[:2_000]}, ok=True, summary="s" * 160
            )
            for k in range(48)
        ],
        limits_hit=["max_rows", "result_bytes"],
    )
    values.update(changes)
    return AnswerOutput(**values)


def test_every_answer_fits_40_000_characters_with_the_default_limits() -> None:
    """Wide, long, many calls, eight samples, long SQL: text plus structured content ≤ 40,000."""
    limits = AnswerLimits(max_rows=50, cell_chars=10_000, query_timeout=10, episode_timeout=300)
    tall = [[f"row {r} " + "y" * 300] for r in range(50)]
    similar = [
        SimilarVerified(question="v" * 2_000, sql="SELECT " + "x, " * 10_000 + "1", line=k) for k in range(3)
    ]
    cases = {
        "wide": long_answer(),
        "long": long_answer(columns=["text"], rows=tall),
        "similar": long_answer(similar_verified=similar),
        "small": long_answer(
            candidates=[],
            trace=[],
            samples=1,
            question="q?",
            sql="SELECT 1",
            rows=[[1]],
            columns=["1"],
            columns_read={},
            tables=[],
        ),
    }
    sizes = {}
    for name, answer in cases.items():
        result = fitted_response(answer, limits)
        text = result.content[0].text
        sizes[name] = answer_chars(text, result.structured_content)
        assert sizes[name] <= DEFAULT_ANSWER_CHARS, (name, sizes[name])
        fitted = AnswerOutput.model_validate(result.structured_content)
        assert fitted.sql == answer.sql  # the SQL is the answer: never cut in the structured result
        assert fitted.trace_omitted == len(answer.trace) - len(fitted.trace)
    assert answer_chars(*_parts(fitted_response(cases["small"], limits))) < 5_000
    print(f"\nlargest answers with the default limits: {sizes}")


def test_cut_candidates_show_where_their_sql_differs() -> None:
    """Eight long SQLs that differ only at their end: once the answer must shrink, each candidate
    still shows its own end (and how much it shares with the answer's SQL), not the same start."""
    limits = AnswerLimits(max_rows=50, cell_chars=10_000, query_timeout=10, episode_timeout=300)
    answer = long_answer(sql=long_answer().candidates[0].sql)
    fitted = AnswerOutput.model_validate(fitted_response(answer, limits).structured_content)
    shown = [c.sql or "" for c in fitted.candidates]
    assert len(set(shown)) == 8 and all(len(s) <= 300 for s in shown), shown
    assert shown[0] == answer.candidates[0].sql[:299] + "…"  # the answer's own: `sql` holds it whole
    assert [s.rsplit(" ", 1)[-1] for s in shown[1:]] == [f"wide{k}" for k in range(1, 8)]
    assert shown[1] == "…(9,376 characters as in the answer's SQL) c1497, c1498, c1499 FROM wide1"
    text = fitted_response(answer, limits).content[0].text
    assert all(s in text for s in shown[1:4]), text  # the text shows the first three others the same way


def test_cut_rows_say_so() -> None:
    """Rows cut to fit the answer's size: truncated, limits_hit and the note say so."""
    limits = AnswerLimits(max_rows=50, cell_chars=10_000, query_timeout=10, episode_timeout=300)
    answer = long_answer(
        columns=["text"],
        rows=[["z" * 4_000] for _ in range(50)],
        note=None,
        limits_hit=[],
        truncated=False,
        sql="SELECT text FROM notes",
        candidates=[],
        samples=1,
        trace=[],
    )
    fitted = AnswerOutput.model_validate(fitted_response(answer, limits).structured_content)
    assert 1 < len(fitted.rows) < 50 and fitted.truncated and fitted.limits_hit == ["result_bytes"]
    assert fitted.note is not None and fitted.note.startswith(
        f"the answer was cut to fit 40,000 characters: only the first {len(fitted.rows)} rows kept"
    )


def _parts(result: Any) -> tuple[str, dict[str, Any]]:
    return result.content[0].text, result.structured_content


async def test_real_wide_and_long_answers_fit(tmp_path: Path) -> None:
    """Through the server: a 300-column and a 50-row × 5,000-character result fit 40,000 characters."""
    ten = ", ".join(f"printf('%.300c', '{c}')" for c in "abcdefghij")
    wide = f"WITH t AS (SELECT {ten}) SELECT * FROM " + ", ".join(f"t t{i}" for i in range(30))
    long = (
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 80) "
        "SELECT n, printf('%.5000c', 'l') FROM r"
    )
    for sql in (wide, long):
        policy = ScriptPolicy(
            [
                assistant_reply("look", tool_call("run_query", sql=sql)),
                assistant_reply("look", tool_call("run_query", sql=sql)),
                assistant_reply("answer", tool_call("submit_sql", sql=sql)),
            ]
        )
        result = await ask(build(tmp_path, ["--demo"], PolicyBackend(policy)), {"question": "Everything?"})
        answer = valid_answer(result)
        assert answer["status"] == "submitted" and answer["truncated"]
        assert answer_chars(result.content[0].text, answer) <= DEFAULT_ANSWER_CHARS


async def test_a_larger_byte_budget_raises_claude_codes_limit(tmp_path: Path) -> None:
    """--max-result-bytes past the default: the tool declares anthropic/maxResultSizeChars (≤ 500,000)."""
    metas = []
    for flags in ([], ["--max-result-bytes", "262144"], ["--max-result-bytes", str(64 * 1024 * 1024)]):
        async with Client(build(tmp_path, ["--demo", *flags], PolicyBackend(ScriptPolicy(["x"])))) as client:
            metas.append((await client.list_tools()).tools[0].meta or {})
    assert [m.get(RESULT_SIZE_META) for m in metas] == [None, 262_144 + 23_616, 500_000]


class CrashingPolicy:
    """A policy whose backend breaks in a way we did not foresee (our bug, not the model's)."""

    def reply(self, prompt: str, model: str) -> ScriptedReply:
        """Always raises."""
        raise RuntimeError("boom")


async def test_every_result_kind_validates_against_the_output_schema(tmp_path: Path) -> None:
    """Answered, failed, bad arguments (ours and the SDK's), unknown alias, runtime down, model
    missing, quota, draining, stopped, a crash: each result's structured content validates."""
    good = ScriptPolicy([assistant_reply("go", tool_call("submit_sql", sql="SELECT count(*) FROM books"))])
    kinds: dict[str, tuple[bool, str, str]] = {}

    async def calls(server: Any, *named: tuple[str, dict[str, Any]]) -> None:
        async with Client(server) as client:
            (tool,) = (await client.list_tools()).tools
            for name, arguments in named:
                result = await client.call_tool(TOOL, arguments)
                assert result.structured_content is not None, name
                jsonschema.validate(result.structured_content, tool.output_schema)
                content = result.structured_content
                kinds[name] = (result.is_error, content["status"], content["stop_reason"])

    books = {"question": "Books?"}
    await calls(
        build(tmp_path, ["--demo"], PolicyBackend(good)),
        ("answered", books),
        ("empty question", {"question": " "}),
        ("samples out of range", {**books, "samples": 99}),
        ("samples not a number", {**books, "samples": "many"}),
        ("no question", {"database": "bookshop"}),
        ("unknown alias", {**books, "database": "nope"}),
    )
    await calls(build(tmp_path, ["--demo"], PolicyBackend(ScriptPolicy(["no idea"]))), ("failed", books))
    for status, name in ((502, "runtime down"), (404, "model missing")):
        failing = PolicyBackend(ScriptPolicy([ScriptedReply("gone", http_status=status)]))
        await calls(build(tmp_path, ["--demo"], failing), (name, books))
    await calls(build(tmp_path, ["--demo"], PolicyBackend(CrashingPolicy())), ("crash", books))
    await calls(
        build(tmp_path, ["--demo", "--token-per-minute", "1"], PolicyBackend(good)),
        ("answered", books),
        ("quota", books),
    )
    draining = build(tmp_path, ["--demo"], PolicyBackend(good))
    draining.gate.draining = True
    await calls(draining, ("draining", books))
    slow = PolicyBackend(
        ScriptPolicy([ScriptedReply(assistant_reply("slow", tool_call("list_tables")), delay=30)])
    )
    stopping = build(tmp_path, ["--demo"], slow)

    async def stop_when_running() -> None:
        while stopping.gate.in_flight == 0:
            await anyio.sleep(0.02)
        await stopping.gate.drain(0)

    async with anyio.create_task_group() as group:
        group.start_soon(stop_when_running)
        await calls(stopping, ("stopped", books))
    assert kinds == {
        "answered": (False, "submitted", "submit_sql"),
        "failed": (False, "failed", kinds["failed"][2]),
        "empty question": (True, "error", "invalid_arguments"),
        "samples out of range": (True, "error", "invalid_arguments"),
        "samples not a number": (True, "error", "invalid_arguments"),
        "no question": (True, "error", "invalid_arguments"),
        "unknown alias": (True, "error", "unknown_database"),
        "runtime down": (True, "error", "backend_unreachable"),
        "model missing": (True, "error", "model_not_found"),
        "crash": (True, "error", "internal_error"),
        "quota": (True, "refused", "quota"),
        "draining": (True, "refused", "stopping"),
        "stopped": (True, "cancelled", "server_stopped"),
    }


async def test_a_failed_call_says_the_same_in_both_contents(tmp_path: Path) -> None:
    """The text and the structured `error` carry the same message; the alias given is kept when known."""
    server = build(tmp_path, ["--demo"], PolicyBackend(ScriptPolicy(["x"])))
    result = await ask(server, {"question": "Books?", "database": "BOOKSHOP", "samples": 0})
    assert error_text(result).startswith("`samples` is 0; give a number from 1 to 8")
    assert (result.structured_content["database"], result.structured_content["question"]) == (
        "bookshop",
        "Books?",
    )
    assert json.dumps(result.structured_content).count("`samples` is 0") == 1
