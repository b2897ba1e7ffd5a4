"""The exact bytes a real client exchanges with the stdio server, for byte-for-byte comparisons.

The server runs under `sh -c 'tee in | python -m mcp_server ... | tee out'`, so mcp.Client talks
to it as to any stdio server while both directions are written to files. Each response is
kept as the line the server wrote, with only the timings (which differ from run to run)
replaced by zeros.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.client import advertise
from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID

from tests.support.mcp import REPO, TOOL, server_command, server_env

# Timings in the structured answer and in the text's closing line ("... in 1.2 s.").
_TIMINGS = (re.compile(r'("(?:seconds|queued_seconds)":\s*)[0-9.e-]+'), re.compile(r"( in )[0-9.]+( s\. )"))


def apps_extension() -> Any:
    """The capability an MCP Apps host (Claude, VS Code) declares: the extension with its MIME type."""
    return advertise(EXTENSION_ID, {"mimeTypes": [APP_MIME_TYPE]})


def without_timings(line: str) -> str:
    """`line` with every timing replaced by 0, everything else byte for byte."""
    line = _TIMINGS[0].sub(r"\g<1>0", line)
    return _TIMINGS[1].sub(r"\g<1>0\g<2>", line)


async def wire_responses(
    tmp_path: Path,
    server_args: list[str],
    arguments: dict[str, Any],
    *,
    mode: str,
    apps: bool = False,
    methods: tuple[str, ...] = ("tools/list", "tools/call"),
) -> dict[str, str]:
    """The server's response lines to `methods` (of the handshake, tools/list and one tools/call),
    by method (timings zeroed)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    sent, received = tmp_path / "client-to-server.txt", tmp_path / "server-to-client.txt"
    pipeline = (
        f"tee {shlex.quote(str(sent))} | {shlex.join(server_command(*server_args))} "
        f"| tee {shlex.quote(str(received))}"
    )
    params = StdioServerParameters(command="sh", args=["-c", pipeline], env=server_env(tmp_path), cwd=REPO)
    with (tmp_path / "stderr.txt").open("w") as errlog:
        from mcp.client.stdio import stdio_client

        async with Client(
            stdio_client(params, errlog=errlog),
            mode=mode,  # type: ignore[arg-type]
            extensions=[apps_extension()] if apps else None,
        ) as client:
            await client.list_tools()
            await client.call_tool(TOOL, arguments)
    asked = {}
    for line in sent.read_text(encoding="utf-8").splitlines():
        message = json.loads(line)
        if message.get("method") in methods and "id" in message:
            asked[message["id"]] = message["method"]
    responses = {}
    for line in received.read_text(encoding="utf-8").splitlines():
        message = json.loads(line)
        if "method" not in message and message.get("id") in asked:
            responses[asked[message["id"]]] = without_timings(line)
    return responses
