"""What an OpenAI-compatible engine tells about itself: what it is, how many requests it serves at once.

Best effort and read-only: llama.cpp's llama-server answers GET /props with its `total_slots`;
llama-cpp-python's server (`python -m llama_cpp.server`) names itself in its OpenAPI title and
serves one request at a time; vLLM and SGLang say neither (they batch: see the backend's default).
"""

from __future__ import annotations

from typing import Any

import httpx

from .base import EngineFacts

LLAMA_SERVER = "llama.cpp's llama-server"
ENGINES_THAT_SAY = "llama-server's /props, 1 for llama-cpp-python's server"  # for help texts
LLAMA_CPP_PYTHON = "llama-cpp-python's server (llama_cpp.server)"
_LLAMA_CPP_PYTHON_TITLE = "llama.cpp Python API"  # FastAPI's title in llama_cpp.server.app
# llama_cpp.server takes requests one at a time; by default a request that arrives while another
# streams makes it end that stream early (ServerSettings.interrupt_requests).
LLAMA_CPP_PYTHON_NOTE = ("a request that arrives while another one streams cuts that one off unless "
                         "the server was started with --interrupt_requests False: keep one runtime "
                         "slot and one sqale-agent or sqale-mcp in front of it")
SILENT_NOTE = ("the engine does not say how many sequences it runs at once; for a server that "
               "serves one request at a time give --runtime-slots 1")


def engine_root(base_url: str) -> str:
    """The server's root for routes outside the OpenAI API (/props, /openapi.json)."""
    return base_url.removesuffix("/v1")


async def engine_facts(client: httpx.AsyncClient, base_url: str, timeout: float) -> EngineFacts:
    """What the engine at `base_url` says about itself; facts with only `where` when it says nothing."""
    # Routes that answer at once even while the engine generates (llama_cpp.server's /v1/models
    # waits for the generation to end).
    root = engine_root(base_url)
    props = await _get_json(client, f"{root}/props", timeout)
    slots = props.get("total_slots") if props is not None else None
    if isinstance(slots, int) and not isinstance(slots, bool) and slots >= 1:
        return EngineFacts(where=base_url, engine=LLAMA_SERVER, slots=slots,
                           slots_source="/props total_slots")
    openapi = await _get_json(client, f"{root}/openapi.json", timeout)
    info = openapi.get("info") if openapi is not None else None
    title = info.get("title") if isinstance(info, dict) else None
    if isinstance(title, str) and _LLAMA_CPP_PYTHON_TITLE in title:
        return EngineFacts(where=base_url, engine=LLAMA_CPP_PYTHON, slots=1,
                           slots_source="llama-cpp-python's server serves one request at a time",
                           notes=(LLAMA_CPP_PYTHON_NOTE,))
    return EngineFacts(where=base_url, notes=(SILENT_NOTE,))


async def _get_json(client: httpx.AsyncClient, url: str, timeout: float) -> dict[str, Any] | None:
    """The JSON object a GET of `url` answers with 200, or None (any failure: the engine does not say)."""
    try:
        response = await client.get(url, timeout=timeout)
        payload = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return payload if isinstance(payload, dict) else None
