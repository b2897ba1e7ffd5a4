"""An SqaleServer built in this process from command-line arguments, and calls on it through mcp.Client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
from mcp import Client
from mcp_types import CallToolResult
from prometheus_client.parser import text_string_to_metric_families

from agent.backends.base import ModelBackend
from agent.backends.registry import make_backend
from mcp_server.answer.output import AnswerOutput
from mcp_server.app import SqaleServer, build_server
from mcp_server.config.command_line import parse_settings
from tests.support.mcp import TOOL

OUTPUT_SCHEMA = AnswerOutput.model_json_schema()  # what the SDK publishes as the tool's outputSchema


def build(tmp_path: Path, argv: list[str], backend: ModelBackend | None = None) -> SqaleServer:
    """The server `argv` configures, caching under tmp_path, answering with `backend` when given."""
    environ = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    settings = parse_settings(argv, environ)
    factory = make_backend if backend is None else (lambda _: backend)
    return build_server(settings, environ=environ, backend_factory=factory)


def error_text(result: CallToolResult) -> str:
    """The message of a tool error, without the SDK's prefix; its structured content (valid
    against the output schema) says the same in `error`."""
    assert result.is_error
    answer = valid_answer(result)
    message = result.content[0].text.removeprefix(f"Error executing tool {TOOL}: ")
    assert (answer["status"] in ("error", "refused", "cancelled"), answer["error"]) == (True, message)
    return message


def valid_answer(result: CallToolResult) -> dict[str, Any]:
    """The result's structured content, checked against the tool's output schema (as published)."""
    assert result.structured_content is not None, result
    jsonschema.validate(result.structured_content, OUTPUT_SCHEMA)
    return result.structured_content


async def ask(server: SqaleServer, arguments: dict[str, Any]) -> CallToolResult:
    """One call of the tool on a fresh client session."""
    async with Client(server) as client:
        return await client.call_tool(TOOL, arguments)


def metric(server: SqaleServer, name: str, **labels: str) -> float:
    """One sample of the server's metrics (0 when absent)."""
    for family in text_string_to_metric_families(server.metrics.render().decode()):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0
