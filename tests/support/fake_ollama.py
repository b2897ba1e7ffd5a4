"""The Ollama API of the fake runtime: /, /api/version, /api/tags, /api/show, /api/generate."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from agent.backends.base import STOP_STRINGS
from tests.support.policies import Generated, ScriptedReply, generate

if TYPE_CHECKING:
    from tests.support.fake_runtime import FakeServer

OLLAMA_VERSION = "0.17.6"  # runs qwen3.5; does not report prompt_eval_cached_count (0.33.3+)
CACHED_COUNT_SINCE = (0, 33, 3)
SHOW_PARAMETERS = "\n".join(
    f"{key:<30} {value}"
    for key, value in (
        ("num_ctx", "16384"),
        ("stop", '"<|im_end|>"'),
        ("stop", '"<|endoftext|>"'),
        ("temperature", "0.6"),
        ("top_k", "20"),
        ("top_p", "0.95"),
    )
)
_DETAILS = {
    "parent_model": "",
    "format": "gguf",
    "family": "qwen35",
    "families": ["qwen35"],
    "parameter_size": "2B",
    "quantization_level": "Q8_0",
}


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("-")[0].split(".")[:3])


def ollama_name(name: str) -> str:
    """Ollama treats `x` and `x:latest` as the same model."""
    return name if ":" in name else f"{name}:latest"


class OllamaApi:
    """Ollama's routes over a FakeServer's models, policy and records."""

    def __init__(self, server: FakeServer) -> None:
        self.server = server

    def routes(self) -> list[Route]:
        """The Ollama routes, for the server's Starlette app."""
        return [
            Route("/", self._root, methods=["GET", "HEAD"]),
            Route("/api/version", self._version, methods=["GET"]),
            Route("/api/tags", self._tags, methods=["GET"]),
            Route("/api/show", self._show, methods=["POST"]),
            Route("/api/generate", self._generate, methods=["POST"]),
        ]

    def _knows(self, model: str) -> bool:
        return ollama_name(model) in {ollama_name(m) for m in self.server.models}

    @staticmethod
    def _missing(model: str) -> JSONResponse:
        return JSONResponse({"error": f'model "{model}" not found, try pulling it first'}, 404)

    async def _root(self, request: Request) -> Response:
        await self.server.record(request)
        return PlainTextResponse("Ollama is running")

    async def _version(self, request: Request) -> Response:
        await self.server.record(request)
        return JSONResponse({"version": self.server.ollama_version})

    async def _tags(self, request: Request) -> Response:
        await self.server.record(request)
        return JSONResponse(
            {
                "models": [
                    {
                        "name": ollama_name(m),
                        "model": ollama_name(m),
                        "modified_at": _now(),
                        "size": 2_000_000_000,
                        "digest": hashlib.sha256(m.encode()).hexdigest(),
                        "details": _DETAILS,
                    }
                    for m in self.server.models
                ]
            }
        )

    async def _show(self, request: Request) -> Response:
        body = (await self.server.record(request)).body or {}
        model = body.get("model") or body.get("name") or ""
        if not self._knows(model):
            return self._missing(model)
        shown = {
            "license": "Apache License, Version 2.0",
            "modelfile": f"FROM /models/{model}.gguf\nTEMPLATE {{{{ .Prompt }}}}\n",
            "parameters": SHOW_PARAMETERS,
            "template": "{{ .Prompt }}",
            "details": _DETAILS,
            "model_info": {
                "general.architecture": "qwen35",
                "general.parameter_count": 2_000_000_000,
                "qwen35.context_length": 262_144,
            },
            "capabilities": ["completion"],
            "modified_at": _now(),
        }
        return JSONResponse({**shown, **self.server.show_overrides})

    async def _generate(self, request: Request) -> Response:
        recorded = await self.server.record(request)
        body = recorded.body if isinstance(recorded.body, dict) else {}
        model = body.get("model") or ""
        if not model:
            return JSONResponse({"error": "model is required"}, 400)
        if not self._knows(model):
            return self._missing(model)
        options = body.get("options") or {}
        prompt = body.get("prompt") or ""
        reply = self.server.ask_policy(prompt, model, options.get("seed"))
        if await self.server.run_delay(request, recorded, reply.delay):
            return Response(status_code=499)  # nobody is listening any more
        if reply.http_status != 200:
            return JSONResponse({"error": reply.text}, reply.http_status)
        generated = generate(
            reply,
            max_tokens=options.get("num_predict"),
            stops=[*STOP_STRINGS, *(options.get("stop") or [])],
        )
        final = self._final(model, prompt, generated, reply)
        if body.get("stream", True) is False:
            return JSONResponse({**final, "response": generated.text})
        return StreamingResponse(self._stream(model, generated.text, final), media_type="application/x-ndjson")

    def _final(self, model: str, prompt: str, generated: Generated, reply: ScriptedReply) -> dict[str, Any]:
        nanos = int(reply.delay * 1e9)
        prompt_tokens, cached = self.server.prompt_counts(model, prompt, generated.text)
        final = {
            "model": model,
            "created_at": _now(),
            "response": "",
            "done": True,
            "done_reason": generated.finish_reason,
            "total_duration": nanos,
            "load_duration": 0,
            "prompt_eval_count": prompt_tokens,
            "prompt_eval_duration": nanos // 4,
            "eval_count": generated.completion_tokens,
            "eval_duration": nanos - nanos // 4,
        }
        if _version(self.server.ollama_version) >= CACHED_COUNT_SINCE:
            final["prompt_eval_cached_count"] = cached  # a subset of prompt_eval_count
        return final

    @staticmethod
    async def _stream(model: str, text: str, final: dict[str, Any]) -> AsyncIterator[bytes]:
        for start in range(0, len(text), 4):
            piece = {"model": model, "created_at": _now(), "response": text[start : start + 4], "done": False}
            yield (json.dumps(piece) + "\n").encode()
        yield (json.dumps(final) + "\n").encode()
