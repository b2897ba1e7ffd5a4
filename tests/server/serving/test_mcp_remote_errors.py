"""Errors a remote (HTTP) client gets name no server path, URL or exception; the server's log has
the detail under the question id the client is given (issue 22, §2). Stdio keeps the detail."""

from __future__ import annotations

import logging
import re
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from agent.backends.base import Completion, ModelBackend
from agent.errors import (
    BackendAuthError,
    BackendResponseError,
    BackendTimeout,
    BackendUnreachable,
    ConfigError,
    DatabasePathError,
    DatabaseWorkerError,
    ModelNotFound,
    SqaleError,
)
from mcp_server.answer.door import checked_call
from mcp_server.answer.question import Answering
from mcp_server.answer.tool_errors import edge_error, tool_error_for
from mcp_server.serving.access import LOCAL_CALLER, Caller, caller_of
from mcp_server.serving.draining import QuestionGate
from mcp_server.serving.log_format import SessionIdFilter, TextLogFormatter, session_tag
from mcp_server.serving.metrics import ServerMetrics
from mcp_server.state import open_state, server_prompts
from tests.support.mcp_in_process import build
from tests.support.policies import PolicyBackend, ScriptPolicy, assistant_reply, tool_call

REMOTE = Caller("analytics", remote=True)
QUESTION_ID = re.compile(r"question id ([0-9a-f]{12})\.$")
INTERNALS = re.compile(r"/|https?:|\\|Error\(|Traceback")  # paths, URLs, exception reprs

SECRET_ERRORS = [
    BackendUnreachable("Could not reach Ollama at http://10.1.2.3:11434 (connection refused)."),
    ModelNotFound("Ollama at http://gpu-7.internal:11434 has no model 'm'; run `ollama create`."),
    BackendTimeout("http://gpu-7.internal:8000/v1 took longer than 120 s."),
    BackendAuthError("http://gpu-7.internal:8000/v1 refused the key sk-…"),
    BackendResponseError("http://gpu-7.internal:8000/v1 answered 500: Traceback ..."),
    DatabasePathError("/srv/secretpath_x.db: not an SQLite 3 database"),
    DatabaseWorkerError("worker pid 4242 died reading /srv/secretpath_x.db"),
    ConfigError("odd setting in /etc/sqale-mcp/config.toml"),
]


@pytest.mark.parametrize("exc", SECRET_ERRORS, ids=lambda e: type(e).__name__)
def test_remote_tool_errors_say_what_failed_without_internals(exc: SqaleError) -> None:
    """Each of our errors, for a remote client: the alias where it matters, a plain cause, who can
    fix it, and the question id; no path, URL or exception text."""
    text = str(tool_error_for(exc, database="sales", remote=True, question_id="0123456789ab"))
    assert INTERNALS.search(text) is None, text
    assert QUESTION_ID.search(text) and "operator" in text
    if isinstance(exc, DatabasePathError | DatabaseWorkerError):
        assert "'sales'" in text


def test_remote_texts_are_exactly_these() -> None:
    """The remote texts, in full, for the two errors the issue saw leak."""
    assert [
        str(tool_error_for(SECRET_ERRORS[i], database="sales", remote=True, question_id="q1")) for i in (0, 5)
    ] == [
        "The model runtime is unreachable, so no question can be answered now. Ask the server's "
        "operator: its log has the details under question id q1.",
        "The database 'sales' cannot be read: its file is missing, unreadable or not an SQLite "
        "database. Ask the server's operator: its log has the details under question id q1.",
    ]


def test_stdio_keeps_the_detail_and_our_bugs_propagate_there() -> None:
    """A stdio client owns the machine: it gets the path; a bug of ours is not mapped for it."""
    assert "/srv/secretpath_x.db" in str(tool_error_for(SECRET_ERRORS[5], database="sales"))
    assert edge_error(RuntimeError("x"), database="sales", remote=False, question_id="q") is None
    remote = edge_error(RuntimeError("/srv/x"), database="sales", remote=True, question_id="q")
    assert str(remote) == (
        "Answering failed because of an error inside the server. Ask the "
        "server's operator: its log has the details under question id q."
    )
    own = ToolError("The question is empty")
    assert edge_error(own, database="sales", remote=True, question_id="q") is own


def test_every_http_request_is_remote_and_stdio_is_not() -> None:
    """An HTTP request (loopback without tokens included) is remote; stdio has no request."""

    class Request:
        def __init__(self) -> None:
            self.scope: dict[str, object] = {}

    assert caller_of(None) == LOCAL_CALLER and not LOCAL_CALLER.remote
    assert caller_of(Request()).remote and caller_of(Request()).name == "local"


class BrokenBackend(ModelBackend):
    """A backend whose every request hits a bug of ours, with a path in its message."""

    model = "m"

    async def complete(self, prompt: str, *, max_tokens: int) -> Completion:
        raise RuntimeError("bug while reading /opt/sqale/secret/state.json")

    async def aclose(self) -> None:
        return None


@asynccontextmanager
async def state_of(tmp_path: Path, argv: list[str], backend: ModelBackend) -> AsyncIterator[Answering]:
    """The answering service of the server `argv` configures, answering with `backend`."""
    server = build(tmp_path, argv, backend)
    settings = server.sqale_settings
    factory: Callable[[object], ModelBackend] = lambda _: backend  # noqa: E731
    async with open_state(
        settings,
        server.catalog,
        server_prompts(settings),
        factory,
        gate=QuestionGate(),
        metrics=ServerMetrics(),
        callers=(),
    ) as server_state:
        yield Answering(server_state)


async def no_progress(progress: float, total: float | None, message: str | None) -> None:
    return None


async def ask(service: Answering, caller: Caller = LOCAL_CALLER) -> object:
    """One question, as `caller` asks it."""
    return await service.ask(checked_call(service, caller, "How many rows?"), None, no_progress)


async def ask_remote(service: Answering, caller: Caller = REMOTE) -> str:
    """The tool error's text a remote caller gets for one question."""
    with pytest.raises(ToolError) as info:
        await ask(service, caller)
    return str(info.value)


@pytest.mark.anyio
async def test_a_remote_caller_gets_no_url_and_the_log_has_it(
    tmp_path: Path, dead_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Backend down: the remote text names no URL; the log line with the same question id does."""
    caplog.set_level(logging.INFO, logger="mcp_server")
    from agent.backends.registry import make_backend
    from mcp_server.config.command_line import parse_settings

    settings = parse_settings(["--demo", "--ollama-host", dead_url], {"XDG_CACHE_HOME": str(tmp_path)})
    async with state_of(tmp_path, ["--demo"], make_backend(settings)) as server_state:
        text = await ask_remote(server_state)
    assert INTERNALS.search(text) is None and text.startswith("The model runtime is unreachable")
    match = QUESTION_ID.search(text)
    assert match
    (record,) = [r for r in caplog.records if getattr(r, "question_id", None) == match.group(1)]
    assert dead_url.removeprefix("http://") in record.getMessage()


@pytest.mark.anyio
async def test_a_database_gone_bad_names_the_alias_not_the_path(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The served file replaced by garbage: the remote text has the alias, the log has the path."""
    caplog.set_level(logging.INFO, logger="mcp_server")
    served = tmp_path / "secretpath_x.db"
    with sqlite3.connect(served) as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    policy = ScriptPolicy([assistant_reply("answer", tool_call("submit_sql", sql="SELECT x FROM t"))])
    async with state_of(tmp_path, ["--db", f"shop={served}"], PolicyBackend(policy)) as server_state:
        served.write_bytes(b"not a database at all" * 100)
        text = await ask_remote(server_state)
    assert text.startswith("The database 'shop' cannot be read") and "secretpath" not in text
    assert any("secretpath_x.db" in r.getMessage() for r in caplog.records)


@pytest.mark.anyio
async def test_a_bug_of_ours_is_an_internal_error_remotely_and_raises_on_stdio(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An unexpected exception: remote gets a plain text with the id (traceback in the log);
    the local caller gets the exception itself."""
    caplog.set_level(logging.INFO, logger="mcp_server")
    async with state_of(tmp_path, ["--demo"], BrokenBackend()) as server_state:
        text = await ask_remote(server_state)
        with pytest.raises(ExceptionGroup) as raised:
            await ask(server_state)
    assert raised.group_contains(RuntimeError, match="secret/state.json", depth=None)
    assert text.startswith("Answering failed because of an error inside the server.")
    assert INTERNALS.search(text) is None
    logged = [r for r in caplog.records if r.levelno == logging.ERROR]  # one per call, with its traceback
    assert len(logged) == 2 and all(r.exc_info and "secret/state.json" in r.getMessage() for r in logged)


def test_text_log_lines_carry_the_question_id() -> None:
    """The id a remote client quotes is on the text log line too (JSON lines have it as a field)."""
    record = logging.LogRecord(
        "mcp_server.answer.audit",
        logging.WARNING,
        __file__,
        1,
        "not answered: %s",
        ("http://10.1.2.3:11434 refused",),
        None,
    )
    record.question_id = "0123456789ab"
    assert (
        TextLogFormatter()
        .format(record)
        .endswith(
            "mcp_server.answer.audit: not answered: http://10.1.2.3:11434 refused [question 0123456789ab]"
        )
    )


def test_session_ids_in_the_sdks_log_lines_become_short_hashes() -> None:
    """Whoever holds a session id and its token can use the session: logs show a hash of it."""
    session = "0123456789abcdef0123456789abcdef"
    record = logging.LogRecord(
        "mcp.server.streamable_http_manager",
        logging.INFO,
        __file__,
        1,
        "Created new transport with session ID: %s",
        (session,),
        None,
    )
    assert SessionIdFilter().filter(record)
    assert record.getMessage() == f"Created new transport with session ID: session:{session_tag(session)}"
    ours = logging.LogRecord("mcp_server.x", logging.INFO, __file__, 1, "question %s", (session,), None)
    assert SessionIdFilter().filter(ours) and ours.getMessage() == f"question {session}"
