"""answer_sql_question in-process: the episode log, the log level and --reference-agent prompts."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from agent.errors import ConfigError, PromptConfigError
from mcp_server.app import build_server
from mcp_server.config.command_line import parse_settings
from tests.support.mcp import BOOK_GOLD, TOOL, KeyedPolicy
from tests.support.mcp_in_process import ask, build
from tests.support.policies import OraclePolicy, PolicyBackend, ScriptedReply, ScriptPolicy

pytestmark = pytest.mark.anyio


async def test_episode_log_gets_one_line_per_question(tmp_path: Path) -> None:
    """--episode-log appends a JSON line per answered question and per failed call, naming the token."""
    log = tmp_path / "episodes.jsonl"
    backend = PolicyBackend(
        KeyedPolicy(
            {
                "refused": ScriptPolicy([ScriptedReply("model gone", http_status=404)]),
                "": OraclePolicy(BOOK_GOLD),
            }
        )
    )
    server = build(tmp_path, ["--demo", "--episode-log", str(log), "--environment", "rich"], backend)
    async with Client(server) as client:
        await client.call_tool(TOOL, {"question": "How many books are there?", "evidence": "all"})
        await client.call_tool(TOOL, {"question": "refused question"})
    first, second = (json.loads(line) for line in log.read_text().splitlines())
    volatile = ("time", "question_id", "seconds", "model_seconds", "tool_seconds", "queued_seconds", "tokens")
    assert {k: v for k, v in first.items() if k not in volatile} == {
        "token": "local",
        "question": "How many books are there?",
        "evidence": "all",
        "database": "bookshop",
        "notes": None,
        "model": "qwen3.5-2b-grpo-synsql",
        "status": "submitted",
        "sql": "SELECT count(*) FROM books",
        "error": None,
        "stop_reason": "submit_sql",
        "row_count": 1,
        "rounds": 3,
        "tool_calls": 3,
        "trace": [
            {"round": 1, "tool": "list_tables", "arguments": {}, "ok": True, "summary": "5 tables:"},
            {
                "round": 2,
                "tool": "run_query",
                "arguments": {"sql": "SELECT count(*) FROM books"},
                "ok": True,
                "summary": "[1 row]",
            },
            {
                "round": 3,
                "tool": "submit_sql",
                "arguments": {"sql": "SELECT count(*) FROM books"},
                "ok": True,
                "summary": "[1 row]",
            },
        ],
        # This backend does not say what its engine served from its cache.
        "prompt_cache": [
            {"round": 1, "prompt": 421, "cached": "unknown", "evaluated": "unknown"},
            {"round": 2, "prompt": 482, "cached": "unknown", "evaluated": "unknown"},
            {"round": 3, "prompt": 558, "cached": "unknown", "evaluated": "unknown"},
        ],
    }
    assert set(first) >= set(volatile)
    assert {k: v for k, v in second.items() if k not in ("time", "question_id", "seconds")} == {
        "token": "local",
        "question": "refused question",
        "evidence": None,
        "database": "bookshop",
        "notes": None,
        "model": "qwen3.5-2b-grpo-synsql",
        "status": "error",
        "stop_reason": "ModelNotFound",
        "error": "The model is not installed: model gone",
        "rounds": 0,
        "tool_calls": 0,
        "trace": [],
        "prompt_cache": [],
    }
    assert second["seconds"] >= 0


@pytest.mark.parametrize("given", ["file", "folder"])
async def test_reference_agent_prompts_are_used(tmp_path: Path, given: str) -> None:
    """--reference-agent takes SYSTEM_PROMPT and USER_TEMPLATE from the authors' file or its folder;
    --assistant-prefix opens the assistant turn."""
    reference = tmp_path / "model" / "sqale_agent.py"
    reference.parent.mkdir()
    reference.write_text('SYSTEM_PROMPT = "REFERENCE SYSTEM"\nUSER_TEMPLATE = "Q: {question}"\n')
    backend = PolicyBackend(OraclePolicy(BOOK_GOLD))
    where = reference if given == "file" else reference.parent
    server = build(
        tmp_path, ["--demo", "--reference-agent", str(where), "--assistant-prefix", "<think>\\n"], backend
    )
    await ask(server, {"question": "How many books are there?"})
    assert backend.requests[0].prompt == (
        "<|im_start|>system\nREFERENCE SYSTEM<|im_end|>\n<|im_start|>user\nQ: How many books are there?"
        "<|im_end|>\n<|im_start|>assistant\n<think>\n"
    )


def test_bad_reference_agent_stops_start_up(tmp_path: Path) -> None:
    """A reference file without the prompts stops start-up with a PromptConfigError naming it."""
    reference = tmp_path / "sqale_agent.py"
    reference.write_text("SYSTEM_PROMPT = 'x'\n")
    with pytest.raises(PromptConfigError) as info:
        build(tmp_path, ["--demo", "--reference-agent", str(reference)], PolicyBackend(ScriptPolicy(["x"])))
    assert str(info.value).startswith(f"{reference}: USER_TEMPLATE is missing")


def test_episode_log_folder_is_created(tmp_path: Path) -> None:
    """--episode-log in a folder that does not exist yet: the folder is created at start."""
    log = tmp_path / "logs" / "today" / "episodes.jsonl"
    build(tmp_path, ["--demo", "--episode-log", str(log)], PolicyBackend(ScriptPolicy(["x"])))
    assert log.is_file()


def test_unwritable_episode_log_stops_start_up(tmp_path: Path) -> None:
    """--episode-log under a plain file (no folder can be made there): ConfigError naming the path."""
    (tmp_path / "file").write_text("")
    log = tmp_path / "file" / "log.jsonl"
    with pytest.raises(ConfigError) as info:
        build(tmp_path, ["--demo", "--episode-log", str(log)], PolicyBackend(ScriptPolicy(["x"])))
    assert str(info.value) == (
        f"--episode-log {log}: cannot append to it (File exists); give a writable file path"
    )


async def test_httpx_request_lines_are_hidden_at_the_default_level(
    tmp_path: Path, fake_ollama: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """At INFO no line per model request is logged; --log-level debug (any case) shows them."""
    from mcp_server.app import configure_logging

    fake = fake_ollama(OraclePolicy(BOOK_GOLD))
    try:
        for level, shown in (("info", False), ("debug", True)):
            settings = parse_settings(
                ["--demo", "--ollama-host", fake.url, "--log-level", level],
                {"XDG_CACHE_HOME": str(tmp_path / "cache")},
            )
            configure_logging(settings.log_level)
            caplog.clear()
            server = build_server(settings, environ={"XDG_CACHE_HOME": str(tmp_path / "cache")})
            await ask(server, {"question": "How many books are there?"})
            assert any(r.name == "httpx" for r in caplog.records) is shown, level
    finally:
        for name in ("httpx", "httpcore"):
            logging.getLogger(name).setLevel(logging.NOTSET)
