"""Listed where people look: server.json for the MCP Registry, valid against the registry's
published schema, and the README line that proves the PyPI package is ours."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib

import jsonschema

from agent.backends.ollama_facts import DEFAULT_OLLAMA_HOST, OLLAMA_PARALLEL_ENV
from agent.backends.registry import BACKENDS, DEFAULT_MODEL
from mcp_server.config.command_line import build_parser
from tests.support.mcp import REPO

SERVER_JSON = REPO / "mcp_server" / "packaging" / "server.json"
# https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json, byte for byte.
SCHEMA = REPO / "tests" / "fixtures" / "mcp-registry-server.schema.json"
SCHEMA_SHA256 = "3fba09590c99f61735d234822279f4223fab9e300c0a81e81c91ab62a4114de0"


def entry() -> dict:
    """server.json, parsed."""
    return json.loads(SERVER_JSON.read_text())


def test_the_schema_fixture_is_the_published_one() -> None:
    """The fixture is the registry's 2025-12-11 schema, unchanged (its published SHA-256)."""
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == SCHEMA_SHA256


def test_server_json_validates_against_the_registry_schema() -> None:
    """server.json is valid under the schema it names, URLs and all (format checks on)."""
    schema = json.loads(SCHEMA.read_text())
    assert entry()["$schema"] == schema["$id"]
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    assert [e.message for e in validator.iter_errors(entry())] == []
    broken = {**entry(), "name": "sqale-mcp", "description": "x" * 101}  # no namespace; too long
    assert len(list(validator.iter_errors(broken))) == 2


def test_server_json_describes_the_package_as_it_is() -> None:
    """The PyPI package and version are this project's; uvx runs it; every argument is a real
    `sqale-mcp` option and every variable one the server reads, with the server's defaults."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    server = entry()
    (package,) = server["packages"]
    assert (package["registryType"], package["identifier"], package["runtimeHint"]) == (
        "pypi",
        project["name"],
        "uvx",
    )
    assert server["version"] == package["version"] == project["version"]
    assert "sqale-mcp" in project["scripts"]  # uvx runs the command named like the package
    options = {s for action in build_parser()._actions for s in action.option_strings}
    arguments = {a["name"]: a for a in package["packageArguments"]}
    assert set(arguments) <= options, set(arguments) - options
    assert arguments["--model"]["default"] == DEFAULT_MODEL
    assert arguments["--backend"]["choices"] == list(BACKENDS)
    variables = {v["name"]: v for v in package["environmentVariables"]}
    assert set(variables) == {"OLLAMA_HOST", OLLAMA_PARALLEL_ENV}
    assert variables["OLLAMA_HOST"]["default"] == DEFAULT_OLLAMA_HOST


def test_readme_names_the_server_once() -> None:
    """The README (PyPI's description) carries `mcp-name: NAME` on one line, NAME as in server.json."""
    lines = [line for line in (REPO / "README.md").read_text().splitlines() if "mcp-name:" in line]
    assert len(lines) == 1, lines
    named = re.fullmatch(r"<!-- mcp-name: (\S+) -->", lines[0])
    assert named is not None and named.group(1) == entry()["name"], lines[0]
