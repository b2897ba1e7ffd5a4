"""`save_verified_answer`, the answer view's "Propose as verified": a proposal, never a verified answer.

In process the client is the local (stdio) caller, whom --verified-writable lets propose; the
HTTP tokens' permission is tested in test_mcp_verified_team.py.
"""

from __future__ import annotations

import getpass
import logging
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from agent.errors import ConfigError
from agent.sqlite import Database, HideRules, create_database
from agent.verified import VerifiedLibrary
from agent.verified.proposals import proposals_path, read_proposals, sql_digest
from agent.verified.reviewing import accept
from mcp_server.answer.door import CHOOSE_TOOL_NAME, SAVE_TOOL_NAME, SAVE_TOOL_TITLE
from mcp_server.answer.output import AnswerOutput
from mcp_server.answer.view import RESULT_META_KEY, app_only_tools
from mcp_server.config.command_line import parse_settings
from mcp_server.config.settings_parts import TokenSpec
from mcp_server.serving.access import LOCAL_CALLER, Caller, may_save
from tests.support.hiding import CONDITION_PROBES, RULES, SCHEMA_SQL
from tests.support.mcp import TOOL
from tests.support.mcp_in_process import build, metric
from tests.support.policies import OraclePolicy
from tests.support.wire import apps_extension

pytestmark = pytest.mark.anyio

GENRES_Q, GENRES_SQL = "Which genres does the shop sell?", "SELECT DISTINCT genre FROM books ORDER BY genre"


async def test_a_save_is_a_proposal_the_next_question_is_answered_by_the_model_until_accepted(
    tmp_path: Path, fake_ollama: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Listed to an Apps client; the save is checked and proposed with who and when; the same question
    is then the model's, with no similar entry; once the owner accepts it, it is verified at once;
    every call leaves a log line (token, question, SQL hash) and a count."""
    caplog.set_level(logging.INFO, logger="mcp_server")
    fake = fake_ollama(OraclePolicy({GENRES_Q: GENRES_SQL}))
    path = tmp_path / "lib.jsonl"
    server = build(
        tmp_path,
        [
            "--demo",
            "--ollama-host",
            fake.url,
            "--verified",
            f"bookshop={path}",
            "--verified-writable",
            "--hide",
            "bookshop=customers.city",
        ],
    )
    async with Client(server, extensions=[apps_extension()]) as client:
        with anyio.fail_after(60):
            tools = {t.name: t.title for t in (await client.list_tools()).tools}
            first = await client.call_tool(TOOL, {"question": GENRES_Q})
            saved = await client.call_tool(
                SAVE_TOOL_NAME, {"database": "bookshop", "question": GENRES_Q, "sql": GENRES_SQL}
            )
            hidden = await client.call_tool(
                SAVE_TOOL_NAME,
                {"database": "bookshop", "question": "Cities?", "sql": "SELECT city FROM customers"},
            )
            unknown = await client.call_tool(
                SAVE_TOOL_NAME, {"database": "sales", "question": "x", "sql": "SELECT 1"}
            )
            asked = await client.call_tool(TOOL, {"question": GENRES_Q})
    assert tools == {
        TOOL: "Answer a question with SQL",
        SAVE_TOOL_NAME: SAVE_TOOL_TITLE,
        CHOOSE_TOOL_NAME: "Use this answer",
    }
    assert (first.meta or {}).get(RESULT_META_KEY) == {"appTools": [SAVE_TOOL_NAME]}
    (proposal,) = read_proposals(proposals_path(path)).proposals
    assert (saved.is_error, saved.content[0].text) == (
        False,
        (
            f"Proposed, awaiting review: \"{GENRES_Q}\" on 'bookshop' is proposal "
            f"{proposal.proposal.proposal}. It is not served as verified until the library's owner accepts it."
        ),
    )
    assert (
        proposal.proposal.question,
        proposal.proposal.sql,
        proposal.proposal.database,
        proposal.proposal.proposed_by,
    ) == (GENRES_Q, GENRES_SQL, "bookshop", getpass.getuser())
    assert (hidden.is_error, hidden.content[0].text) == (
        True,
        "Not saved: its SQL fails: no such column: city.",
    )
    assert unknown.is_error and "Unknown database 'sales'" in unknown.content[0].text
    assert not path.exists()
    answer = AnswerOutput.model_validate(asked.structured_content)
    assert (answer.status, answer.verified, answer.similar_verified) == ("submitted", None, [])
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("save on ")]
    assert logged == [
        f"save on 'bookshop' for token 'local': proposed (question {GENRES_Q!r}, sql sha256 "
        f"{sql_digest(GENRES_SQL)[:16]}…, {len(GENRES_SQL)} characters): {saved.content[0].text}",
        "save on 'bookshop' for token 'local': refused (question 'Cities?', sql sha256 "
        f"{sql_digest('SELECT city FROM customers')[:16]}…, 26 characters): {hidden.content[0].text}",
        f"save on '-' for token 'local': invalid (question 'x', sql sha256 {sql_digest('SELECT 1')[:16]}…, 8 "
        f"characters): {unknown.content[0].text}",
    ]
    assert [
        metric(server, "sqale_verified_saves_total", outcome=o) for o in ("proposed", "refused", "invalid")
    ] == [1, 1, 1]
    demo = server.catalog.entry("bookshop").path
    library = VerifiedLibrary(path, "bookshop")
    with Database(demo, hide=HideRules.parse(["customers.city"])) as database:
        assert accept(library, database, proposal, by="olga").done
    restarted = build(
        tmp_path,
        [
            "--demo",
            "--ollama-host",
            fake.url,
            "--verified",
            f"bookshop={path}",
            "--hide",
            "bookshop=customers.city",
        ],
    )  # a server's lifespan runs once
    async with Client(restarted) as client:
        again = await client.call_tool(TOOL, {"question": GENRES_Q.lower()})
    verified = AnswerOutput.model_validate(again.structured_content)
    assert (verified.status, verified.verified and verified.verified.added_by) == (
        "verified",
        f"{getpass.getuser()}, accepted by olga",
    )
    assert len(fake.bodies("/api/generate")) == 6  # two episodes of the model, none for the verified one


async def test_no_condition_on_hidden_data_changes_what_the_save_tool_says(
    tmp_path: Path, fake_ollama: Any
) -> None:
    """The issue's one-bit-per-save probes through the tool: each pair's two answers are the same
    error, and the quota counts every one of them."""
    database = create_database(tmp_path / "secrets.db", SCHEMA_SQL)
    server = build(
        tmp_path,
        [
            "--db",
            f"s={database}",
            "--ollama-host",
            fake_ollama(OraclePolicy({})).url,
            "--verified",
            f"s={tmp_path / 'lib.jsonl'}",
            "--verified-writable",
            *(f"--hide=s={rule}" for rule in RULES),
        ],
    )
    async with Client(server, extensions=[apps_extension()]) as client:
        said = []
        for number, pair in enumerate(CONDITION_PROBES):
            texts = [
                (
                    await client.call_tool(
                        SAVE_TOOL_NAME, {"database": "s", "question": f"p{number}", "sql": sql}
                    )
                )
                .content[0]
                .text
                for sql in pair
            ]
            said.append(texts[0] == texts[1])
    assert said == [True] * len(CONDITION_PROBES)
    assert metric(server, "sqale_verified_saves_total", outcome="refused") == 2 * len(CONDITION_PROBES)
    assert not proposals_path(tmp_path / "lib.jsonl").exists()


async def test_saves_count_against_the_tokens_quota_and_refusals_say_when_to_retry(
    tmp_path: Path, fake_ollama: Any
) -> None:
    """With 2 episodes a minute, two saves use the minute up: the third save and the next question
    are refused with when to retry."""
    fake = fake_ollama(OraclePolicy({GENRES_Q: GENRES_SQL}))
    server = build(
        tmp_path,
        [
            "--demo",
            "--ollama-host",
            fake.url,
            "--verified",
            f"bookshop={tmp_path / 'l.jsonl'}",
            "--verified-writable",
            "--token-per-minute",
            "2",
        ],
    )
    async with Client(server, extensions=[apps_extension()]) as client:
        results = [
            await client.call_tool(
                SAVE_TOOL_NAME, {"database": "bookshop", "question": f"q{n}", "sql": "SELECT 1"}
            )
            for n in range(3)
        ]
        question = await client.call_tool(TOOL, {"question": GENRES_Q})
    assert [r.is_error for r in results] == [False, False, True]
    assert (
        results[2]
        .content[0]
        .text.startswith("Not saved: Too many questions: token 'local' may ask 2 per minute. Retry in ")
    )
    assert question.is_error and "Too many questions" in question.content[0].text
    assert metric(server, "sqale_verified_saves_total", outcome="quota") == 1


def test_saving_is_a_permission_the_operator_grants_per_token() -> None:
    """The stdio client may with --verified-writable; over HTTP only a token whose table says
    save-verified, never the --auth-token-env token, tokenless loopback, or anyone without the flag;
    the tool is offered to those whose databases have a library."""
    granted = TokenSpec(name="writer", env="W", secret="w", save_verified=True)  # type: ignore[arg-type]
    plain = TokenSpec(name="reader", env="R", secret="r")  # type: ignore[arg-type]
    settings = parse_settings(["--demo", "--verified", "bookshop=lib.jsonl", "--verified-writable"], {})
    settings = settings.model_copy(update={"tokens": (granted, plain)})
    callers = [
        LOCAL_CALLER,
        Caller("writer", remote=True),
        Caller("reader", remote=True),
        Caller("default", remote=True),
        Caller("local", remote=True),
    ]
    assert [may_save(settings, c) for c in callers] == [True, True, False, False, False]
    (tool,) = app_only_tools(settings)  # shown to those, when one of their databases has a library
    elsewhere = Caller("writer", databases=("sales",), remote=True)
    assert [tool.offered(c) for c in (*callers, elsewhere)] == [True, True, False, False, False, False]
    off = settings.model_copy(update={"verified_writable": False})
    assert ([may_save(off, c) for c in callers], app_only_tools(off)) == ([False] * 5, ())


def test_a_token_granted_saving_without_a_writable_library_is_refused_at_start(tmp_path: Path) -> None:
    """save-verified = true without --verified-writable stops the server with what to add."""
    config = tmp_path / "team.toml"
    config.write_text(
        '[verified]\nbookshop = "lib.jsonl"\n[tokens.writer]\nenv = "W"\nsave-verified = true\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"tokens.writer: save-verified = true needs --verified-writable"):
        parse_settings(["--demo", "--config", str(config)], {"W": "secret", "XDG_CACHE_HOME": str(tmp_path)})
    config.write_text('[tokens.writer]\nenv = "W"\nsave-verified = "yes"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"tokens.writer.save-verified: Input should be a valid boolean"):
        parse_settings(["--demo", "--config", str(config)], {"W": "secret", "XDG_CACHE_HOME": str(tmp_path)})


async def test_no_save_tool_without_writable_library_or_for_clients_without_apps(
    tmp_path: Path, fake_ollama: Any
) -> None:
    """Without --verified-writable no client lists it; with it, a client without Apps neither lists
    nor may call it (answered as an unknown tool)."""
    fake = fake_ollama(OraclePolicy({}))
    path = tmp_path / "lib.jsonl"
    read_only = build(tmp_path, ["--demo", "--ollama-host", fake.url, "--verified", f"bookshop={path}"])
    async with Client(read_only, extensions=[apps_extension()]) as client:
        assert [t.name for t in (await client.list_tools()).tools] == [TOOL, CHOOSE_TOOL_NAME]
    writable = build(
        tmp_path, ["--demo", "--ollama-host", fake.url, "--verified", f"bookshop={path}", "--verified-writable"]
    )
    async with Client(writable) as client:
        assert [t.name for t in (await client.list_tools()).tools] == [TOOL]
        refused = await client.call_tool(
            SAVE_TOOL_NAME, {"database": "bookshop", "question": "q", "sql": "SELECT 1"}
        )
    assert (refused.is_error, refused.content[0].text) == (True, f"Unknown tool: {SAVE_TOOL_NAME}")
    assert not path.exists() and not proposals_path(path).exists()


def test_writable_without_a_library_is_refused_at_start(tmp_path: Path) -> None:
    """--verified-writable alone stops the server with what to add."""
    with pytest.raises(
        ConfigError,
        match=r"--verified-writable needs a library to write to: add "
        r"--verified ALIAS=FILE",
    ):
        parse_settings(["--demo", "--verified-writable"], {"XDG_CACHE_HOME": str(tmp_path)})
