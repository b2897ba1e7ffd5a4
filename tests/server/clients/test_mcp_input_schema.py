"""The tool's input schema: the plainest one that states the contract (optional arguments as their
type, no null branch), valid for the SDKs' validators, and null still taken for an argument left out."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from jsonschema.validators import validator_for
from mcp import Client

from tests.support.mcp import BOOK_GOLD, REPO, TOOL
from tests.support.mcp_in_process import build, valid_answer
from tests.support.node_tools import node_env, node_tool
from tests.support.policies import OraclePolicy, PolicyBackend

pytestmark = pytest.mark.anyio

TS_CLIENT = "@modelcontextprotocol/client@2.4.0"  # the official TypeScript SDK's client (.ci/run installs it)
QUESTION = "How many books are there?"
# Arguments and whether the schema takes them: every optional one omitted, given, or out of its contract.
CASES: list[tuple[dict[str, Any], bool]] = [
    ({"question": QUESTION}, True),
    ({"question": QUESTION, "database": "bookshop", "evidence": "hint", "samples": 3, "verified": False}, True),
    ({"question": QUESTION, "database": "nowhere"}, False),
    ({"question": QUESTION, "database": {"anyOf": ["bookshop"]}}, False),  # what a form sent for anyOf
    ({"question": QUESTION, "evidence": "e" * 4_001}, False),
    ({"question": QUESTION, "samples": 0}, False),
    ({"question": QUESTION, "samples": 9}, False),
    ({"question": QUESTION, "samples": "many"}, False),
    ({"question": QUESTION, "verified": "yes"}, False),
    ({"question": "q" * 2_001}, False),
    ({"database": "bookshop"}, False),
]


def library(tmp_path: Path) -> Path:
    """A verified library for the demo bookshop, so that `verified` is advertised."""
    path = tmp_path / "bookshop-verified.jsonl"
    path.write_text(
        json.dumps(
            {
                "database": "bookshop",
                "question": "Which genres are there?",
                "sql": "SELECT DISTINCT genre FROM books",
            }
        )
        + "\n",
        encoding="utf-8",
    )
    return path


async def listed_schema(tmp_path: Path) -> dict[str, Any]:
    """The input schema a client lists, of a server with a verified library."""
    server = build(
        tmp_path,
        ["--demo", "--verified", f"bookshop={library(tmp_path)}"],
        PolicyBackend(OraclePolicy(BOOK_GOLD)),
    )
    async with Client(server) as client:
        (tool,) = (await client.list_tools()).tools
    return tool.input_schema


async def test_optional_arguments_are_advertised_as_their_type(tmp_path: Path) -> None:
    """Only `question` is required; each optional argument is its type with its bounds and the
    default the server applies where it has one, without an anyOf null branch or a null default
    (a form would send `{"anyOf": [...]}`, or "no" for a yes/no field it was not told the default of)."""
    schema = await listed_schema(tmp_path)
    properties = schema["properties"]
    assert schema["required"] == ["question"]
    assert {
        name: {k: v for k, v in p.items() if k not in ("title", "description")}
        for name, p in properties.items()
        if name != "question"
    } == {
        "database": {"type": "string", "enum": ["bookshop"]},
        "evidence": {"type": "string", "maxLength": 4_000},
        "samples": {"type": "integer", "minimum": 1, "maximum": 8, "default": 1},
        "verified": {"type": "boolean", "default": True},
    }
    assert "null" not in json.dumps(schema) and "anyOf" not in json.dumps(schema)


async def test_the_schema_states_the_contract_to_jsonschema(tmp_path: Path) -> None:
    """The schema is valid for its dialect (as the Python SDK's client checks schemas, with
    jsonschema's validator_for) and takes exactly the arguments the contract allows."""
    schema = await listed_schema(tmp_path)
    validator_class = validator_for(schema)
    validator_class.check_schema(schema)
    validator = validator_class(schema)
    assert [validator.is_valid(arguments) for arguments, _ in CASES] == [ok for _, ok in CASES]


async def test_the_typescript_sdk_validator_reads_it_the_same(tmp_path: Path) -> None:
    """The TypeScript SDK's own validator (its Ajv provider, as a client uses it) compiles the
    schema and takes and refuses the same arguments."""
    node = node_tool("node", "node@22")
    modules = REPO / ".ci" / "node" / "node_modules"
    if not (modules / "@modelcontextprotocol" / "client").is_dir():
        pytest.skip(
            f"{TS_CLIENT} is absent from .ci/node; install it with "
            f"`npm install --prefix .ci/node {TS_CLIENT}` (.ci/run does)"
        )
    schema = await listed_schema(tmp_path)
    script = (
        "const { AjvJsonSchemaValidator } = require('@modelcontextprotocol/client/validators/ajv');"
        "const { schema, cases } = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "const validate = new AjvJsonSchemaValidator().getValidator(schema);"
        "console.log(JSON.stringify(cases.map(c => validate(c).valid)));"
    )
    done = subprocess.run(
        [str(node), "-e", script],
        input=json.dumps({"schema": schema, "cases": [arguments for arguments, _ in CASES]}),
        env={**node_env(), "NODE_PATH": str(modules)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [ok for _, ok in CASES]


async def test_null_for_an_argument_left_out_is_still_taken(tmp_path: Path) -> None:
    """Clients that send null for every optional argument (as the old schema allowed) get the
    answer they get when leaving them out."""
    server = build(
        tmp_path,
        ["--demo", "--verified", f"bookshop={library(tmp_path)}"],
        PolicyBackend(OraclePolicy(BOOK_GOLD)),
    )
    volatile = {"seconds", "queued_seconds", "tokens"}
    answers = []
    async with Client(server) as client:
        for arguments in (
            {"question": QUESTION},
            {"question": QUESTION, "database": None, "evidence": None, "samples": None, "verified": None},
        ):
            result = await client.call_tool(TOOL, arguments)
            assert not result.is_error, result.content
            answers.append({k: v for k, v in valid_answer(result).items() if k not in volatile})
    assert answers[0] == answers[1] and answers[0]["rows"] == [[16]]
