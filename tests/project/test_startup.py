"""What each command imports before it does anything: the start-up a person waits for.

`--version` of both commands reads nothing but the standard library and the module that prints
it; `sqale-agent ask`, `tool` and `golden` never load the MCP SDK or the HTTP server side
(`tool` and `golden` not even an HTTP client); the stdio server loads, before its `initialize`
reply, nothing of the HTTP server side or OpenTelemetry beyond what the SDK's own minimal server
loads. Each command runs in a subprocess with `python -X importtime`, which lists every module
as it is imported. `sqale-agent` imports only the module of the command it runs, and that
command's parser is the one it has among all. How long start-up takes is bench/bench_startup.py's
to say.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from agent.commands.argparse_shim import option_groups, subcommands
from agent.commands.cli import COMMANDS, build_parser, named_command
from tests.support.console import console_script
from tests.support.mcp import server_command, server_env
from tests.support.policies import OraclePolicy
from tests.support.startup import MINIMAL_SERVER

QUESTION = "How many rows has t?"
QUESTION_SQL = "SELECT count(*) FROM t"
# The MCP SDK, our server, its HTTP side and telemetry: nothing an agent command has a use for.
SERVER_SIDE = frozenset(
    {
        "mcp",
        "mcp_types",
        "mcp_server",
        "starlette",
        "sse_starlette",
        "uvicorn",
        "prometheus_client",
        "opentelemetry",
    }
)
HTTP_CLIENT = frozenset({"httpx", "httpcore", "h11", "ollama"})
HTTP_SERVING_AND_TELEMETRY = frozenset({"uvicorn", "starlette", "sse_starlette", "opentelemetry"})
# The SQLite worker's loop and what runs a statement there: the worker process loads them; the
# server sends requests (agent/sqlite/_requests.py) and loads the guard only with the first of the
# owner's statements it runs itself (agent/sqlite/_inline.py), never to answer the handshake.
WORKER_ONLY = frozenset(
    {
        "agent.sqlite._worker",
        "agent.sqlite._guard",
        "agent.sqlite._authorizer",
        "agent.sqlite._reads",
        "agent.sqlite._fit",
    }
)
# What answering a question runs, and the metrics it counts: the stdio server loads them once its
# first reply is written (app.answering_over, SqaleServer.metrics), never to build itself or to
# answer the handshake.
AFTER_THE_FIRST_REPLY = frozenset(
    {
        "mcp_server.answer.question",
        "mcp_server.answer.asking",
        "mcp_server.answer.audit",
        "mcp_server.answer.samples",
        "mcp_server.answer.sizing",
        "mcp_server.answer.answer_text",
        "mcp_server.answer.verified",
        "agent.loop",
        "agent.sampling",
        "agent.verified",
        "mcp_server.serving.metrics",
        "prometheus_client",
    }
)
BUILD_SERVER = """\
import os, sys
from mcp_server.app import build_server
from mcp_server.config.command_line import parse_settings
build_server(parse_settings(sys.argv[1:], os.environ), environ=os.environ)
"""
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}


def imported(stderr: str) -> list[str]:
    """The modules `-X importtime` reported, in import order."""
    return [line.rpartition("|")[2].strip() for line in stderr.splitlines() if line.startswith("import time:")]


def third_party(modules: Sequence[str]) -> set[str]:
    """The top-level packages of `modules` outside the standard library (ours included)."""
    return {m.partition(".")[0] for m in modules} - set(sys.stdlib_module_names)


def run_imports(argv: Sequence[str], tmp_path: Path, *, expect_code: int = 0) -> list[str]:
    """The modules a command imports from start to exit, run as `python -X importtime ARGV`."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        cwd=tmp_path,
        env=server_env(tmp_path),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == expect_code, done.stderr[-3000:]
    return imported(done.stderr)


def initialize_imports(argv: Sequence[str], tmp_path: Path) -> list[str]:
    """The modules a stdio server has imported when its `initialize` reply arrives."""
    log = tmp_path / "importtime.txt"
    with log.open("w", encoding="utf-8") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-X", "importtime", *argv],
            cwd=tmp_path,
            env=server_env(tmp_path),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
            process.stdin.flush()
            reply = json.loads(process.stdout.readline() or b"null")
            modules = imported(log.read_text(encoding="utf-8"))  # before the shutdown imports anything
        finally:
            process.stdin.close()
            process.wait(timeout=60)
            process.stdout.close()
    assert isinstance(reply, dict) and "result" in reply, reply
    return modules


@pytest.fixture
def tiny_db(tmp_path: Path) -> Path:
    """A database of one table with three rows."""
    path = tmp_path / "tiny.db"
    with sqlite3.connect(path) as connection:
        connection.executescript("CREATE TABLE t (id INTEGER PRIMARY KEY); INSERT INTO t VALUES (1), (2), (3);")
    connection.close()
    return path


@pytest.mark.slow  # a subprocess per command
@pytest.mark.parametrize(
    ("script", "ours"),
    [
        ("sqale-agent", {"agent", "agent.commands", "agent.commands.cli", "agent.errors", "agent.version"}),
        ("sqale-mcp", {"mcp_server", "mcp_server.__main__", "agent", "agent.errors", "agent.version"}),
    ],
)
def test_version_imports_only_the_standard_library(script: str, ours: set[str], tmp_path: Path) -> None:
    """`--version` loads no third-party package (no settings, no SDK) and of ours only what prints it."""
    modules = run_imports([console_script(script), "--version"], tmp_path)
    started_with = run_imports(["-c", "pass"], tmp_path)  # what site's .pth files load, e.g. an editable finder
    assert third_party(modules) - third_party(started_with) - {"agent", "mcp_server"} == set()
    assert {m for m in modules if m.partition(".")[0] in ("agent", "mcp_server")} == ours


@pytest.mark.slow  # a subprocess per command
def test_ask_loads_no_server_side(fake_ollama, tiny_db: Path, tmp_path: Path) -> None:
    """`sqale-agent ask` talks to the model through an HTTP client and loads nothing of the server."""
    server = fake_ollama(OraclePolicy({QUESTION: QUESTION_SQL}))
    modules = run_imports(
        [console_script("sqale-agent"), "ask", "--db", str(tiny_db), "--ollama-host", server.url, QUESTION],
        tmp_path,
    )
    assert "agent.loop" in modules  # it did answer
    assert third_party(modules) & SERVER_SIDE == set()


@pytest.mark.slow  # a subprocess per command
@pytest.mark.parametrize(
    "argv",
    [
        ["tool", "run_query", json.dumps({"sql": QUESTION_SQL})],
        ["golden", "add", QUESTION, QUESTION_SQL, "--by", "test", "--file", "golden.jsonl"],
    ],
    ids=["tool", "golden"],
)
def test_commands_without_a_model_load_neither_server_nor_http_client(
    argv: list[str], tiny_db: Path, tmp_path: Path
) -> None:
    """`sqale-agent tool` and `golden` load neither the server side nor an HTTP client."""
    modules = run_imports([console_script("sqale-agent"), *argv, "--db", str(tiny_db)], tmp_path)
    assert "agent.sqlite" in modules
    assert third_party(modules) & (SERVER_SIDE | HTTP_CLIENT) == set()


@pytest.mark.slow  # a subprocess per command
def test_stdio_server_loads_no_http_serving_or_telemetry_before_initialize(fake_ollama, tmp_path: Path) -> None:
    """Up to its `initialize` reply the stdio server loads no module of uvicorn, starlette or
    OpenTelemetry that the SDK's minimal stdio server does not load, nor our HTTP layers, nor the
    SQLite worker's own modules (its databases are checked on a worker process started meanwhile)."""
    minimal = tmp_path / "minimal_server.py"
    minimal.write_text(MINIMAL_SERVER, encoding="utf-8")
    sdk = set(initialize_imports([str(minimal)], tmp_path))
    server = fake_ollama(OraclePolicy({}))
    argv = server_command("--demo", "--ollama-host", server.url, "--log-level", "WARNING")[1:]
    ours = initialize_imports(argv, tmp_path)
    assert "mcp_server.app" in ours
    beyond = [m for m in ours if m not in sdk]
    assert [
        m
        for m in beyond
        if m.partition(".")[0] in HTTP_SERVING_AND_TELEMETRY
        or m.startswith(("mcp_server.serving.http_transport", "mcp_server.serving.uvicorn_shim"))
        or m in WORKER_ONLY
    ] == []


@pytest.mark.slow  # a subprocess
def test_the_server_is_built_without_its_answer_path(tmp_path: Path) -> None:
    """Building the server (settings, databases checked, the tool and its schemas) loads nothing of
    the answer path, nor the metrics: they load after the first reply, so a client's handshake
    never waits for them."""
    modules = set(run_imports(["-c", BUILD_SERVER, "--demo", "--ollama-host", "http://127.0.0.1:9"], tmp_path))
    assert ("mcp_server.answer.door" in modules, sorted(modules & AFTER_THE_FIRST_REPLY)) == (True, [])


@pytest.mark.slow  # a subprocess per command
def test_help_lists_the_commands_without_importing_them(tmp_path: Path) -> None:
    """`sqale-agent --help` names every command from the table alone: no command module loads (the
    parser's own, argparse_shim, is no command)."""
    modules = run_imports([console_script("sqale-agent"), "--help"], tmp_path)
    assert [
        m
        for m in modules
        if m.startswith("agent.commands.") and m not in ("agent.commands.cli", "agent.commands.argparse_shim")
    ] == []


def subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of subcommand `name` (argparse has no public way to reach it)."""
    return next(p for p in subcommands(parser) if p.prog == f"sqale-agent {name}")


def test_a_command_gets_the_same_parser_alone_as_among_all() -> None:
    """Built for its own command line, a command's parser and help are those it has when every
    command is built; the others keep their name and help line only."""
    everything = build_parser()
    for command in COMMANDS:
        alone = build_parser(only=(command.name,))
        assert subparser(alone, command.name).format_help() == subparser(everything, command.name).format_help()
        assert alone.format_help() == everything.format_help()
        others = [p for c in COMMANDS if c != command for p in [subparser(alone, c.name)]]
        assert [option_groups(p) for p in others] == [[] for _ in others]


def test_the_named_command_is_the_first_argument_that_is_no_option() -> None:
    """The options before a command take no value: its name is the first non-option argument."""
    assert [
        named_command(argv)
        for argv in (
            [],
            ["--version"],
            ["--help"],
            ["ask", "--db", "x.db", "q?"],
            ["--", "tool", "list_tables"],
            ["-h", "golden", "add"],
            ["nonsense"],
        )
    ] == [(), (), (), ("ask",), ("tool",), ("golden",), ("nonsense",)]
