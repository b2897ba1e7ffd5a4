"""The OpenAI-compatible API of the fake runtime: /v1/models, /v1/completions, llama-server's /props,
and, when it plays llama_cpp.server, that server's /openapi.json and its one request at a time."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agent.backends.base import STOP_STRINGS
from tests.support.policies import Generated, count_tokens, generate

if TYPE_CHECKING:
    from tests.support.fake_runtime import FakeServer, RecordedRequest


class OpenAIApi:
    """The OpenAI-compatible routes (as vLLM and llama_cpp.server answer) over a FakeServer."""

    def __init__(self, server: FakeServer) -> None:
        self.server = server
        # llama_cpp.server's two locks: a request waits on `outer` while another holds `inner`,
        # which is how the one generating sees that another request is waiting.
        self._outer = anyio.Lock()
        self._inner = anyio.Lock()

    def routes(self) -> list[Route]:
        """The /v1 routes and /props, for the server's Starlette app."""
        return [
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/v1/completions", self._completions, methods=["POST"]),
            Route("/props", self._props, methods=["GET"]),
            Route("/openapi.json", self._openapi, methods=["GET"]),
            Route("/version", self._version, methods=["GET"]),
        ]

    def _refused(self, recorded: RecordedRequest) -> JSONResponse | None:
        key = self.server.api_key
        if key is None or recorded.headers.get("authorization") == f"Bearer {key}":
            return None
        return JSONResponse({"error": "Unauthorized"}, 401)  # what vLLM's --api-key answers

    async def _models(self, request: Request) -> Response:
        recorded = await self.server.record(request)
        if (refused := self._refused(recorded)) is not None:
            return refused
        extra = {"max_model_len": self._context()} if self.server.vllm else {}
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {"id": m, "object": "model", "created": 0, "owned_by": "fake", **extra}
                    for m in self.server.models
                ],
            }
        )

    def _context(self) -> int:
        return self.server.context_tokens or 16_384

    async def _props(self, request: Request) -> Response:
        await self.server.record(request)
        if self.server.total_slots is None:
            return JSONResponse({"detail": "Not Found"}, 404)
        # llama-server's defaults: min_p 0.05 and top_k 40 unless a request says otherwise.
        settings = {
            "id": 0,
            "n_ctx": self._context(),
            "params": {
                "temperature": 0.8,
                "top_k": 40,
                "top_p": 0.95,
                "min_p": 0.05,
                "typical_p": 1.0,
                "repeat_penalty": 1.0,
            },
        }
        return JSONResponse(
            {
                "default_generation_settings": settings,
                "total_slots": self.server.total_slots,
                "model_path": "/models/fake.gguf",
                "build_info": "b9999-fake",
            }
        )

    async def _version(self, request: Request) -> Response:
        await self.server.record(request)
        if not self.server.vllm:
            return JSONResponse({"detail": "Not Found"}, 404)
        return JSONResponse({"version": "0.26.0"})

    async def _openapi(self, request: Request) -> Response:
        await self.server.record(request)
        if not self.server.llama_cpp_python:
            return JSONResponse({"detail": "Not Found"}, 404)
        return JSONResponse(
            {"openapi": "3.1.0", "info": {"title": "🦙 llama.cpp Python API", "version": "0.3.36"}, "paths": {}}
        )

    async def _completions(self, request: Request) -> Response:
        if not self.server.llama_cpp_python:
            return await self._complete(request)
        async with self._outer:
            await self._inner.acquire()
        try:
            return await self._complete(request)
        finally:
            self._inner.release()

    def _cut_off(self) -> bool:
        """Whether llama_cpp.server would end the generation now: another request is waiting."""
        return self.server.llama_cpp_python and self.server.interrupt_requests and self._outer.locked()

    async def _complete(self, request: Request) -> Response:
        recorded = await self.server.record(request)
        if (refused := self._refused(recorded)) is not None:
            return refused
        body = recorded.body if isinstance(recorded.body, dict) else {}
        model = body.get("model") or ""
        if self.server.crash_on_completion:
            return StreamingResponse(_broken("the engine crashed"), media_type="text/event-stream")
        if self.server.llama_cpp_python:
            model = self.server.models[0]  # any name: it answers with the one model it serves
        if model not in self.server.models:
            return JSONResponse(
                {
                    "object": "error",
                    "message": f"The model `{model}` does not exist.",
                    "type": "NotFoundError",
                    "param": None,
                    "code": 404,
                },
                404,
            )
        prompt = body.get("prompt") if isinstance(body.get("prompt"), str) else ""
        if self.server.context_tokens is not None and count_tokens(prompt) >= self.server.context_tokens:
            return self._context_exceeded(count_tokens(prompt), body)
        reply = self.server.ask_policy(prompt, model, body.get("seed"))
        if self.server.llama_cpp_python and body.get("stream"):
            # It generates during the delay; a request arriving meanwhile cuts it off.
            with anyio.move_on_after(reply.delay):
                while not self._cut_off():
                    await anyio.sleep(0.01)
            if self._cut_off():
                return StreamingResponse(_interrupted(), media_type="text/event-stream")
        elif await self.server.run_delay(request, recorded, reply.delay):
            return Response(status_code=499)
        if reply.http_status != 200:
            return JSONResponse(
                {
                    "object": "error",
                    "message": reply.text,
                    "type": "InternalServerError",
                    "param": None,
                    "code": reply.http_status,
                },
                reply.http_status,
            )
        stop = body.get("stop") or []
        generated = generate(
            reply,
            max_tokens=body.get("max_tokens", 16),  # 16: the API's documented default
            stops=[*STOP_STRINGS, *([stop] if isinstance(stop, str) else stop)],
        )
        prompt_tokens, cached = self.server.prompt_counts(model, prompt, generated.text)
        head = {
            "id": f"cmpl-{len(self.server.requests)}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model,
        }
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": generated.completion_tokens,
            "total_tokens": prompt_tokens + generated.completion_tokens,
        }
        llama_server = self.server.total_slots is not None
        if llama_server or (self.server.vllm and self.server.prompt_tokens_details):
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        elif self.server.vllm:
            usage["prompt_tokens_details"] = None  # vLLM without --enable-prompt-tokens-details
        # llama-server's `timings`: prompt_n evaluated this request, cache_n served from its cache.
        timings = (
            {
                "cache_n": cached,
                "prompt_n": prompt_tokens - cached,
                "prompt_ms": 1.0,
                "predicted_n": generated.completion_tokens,
                "predicted_ms": 1.0,
            }
            if llama_server
            else None
        )
        if body.get("stream"):
            options = body.get("stream_options") or {}
            with_usage = bool(options.get("include_usage")) if isinstance(options, dict) else False
            with_usage = with_usage and not self.server.llama_cpp_python  # its streams carry no usage
            # llama-server ends a /v1/completions stream with usage and timings whatever it is asked.
            sent = usage if with_usage or llama_server else None
            return StreamingResponse(
                self._stream(head, generated, sent, timings), media_type="text/event-stream"
            )
        return JSONResponse(
            {
                **head,
                "choices": [
                    {
                        "index": 0,
                        "text": generated.text,
                        "logprobs": None,
                        "finish_reason": generated.finish_reason,
                    }
                ],
                "usage": usage,
                **({"timings": timings} if timings is not None else {}),
            }
        )

    def _context_exceeded(self, prompt_tokens: int, body: dict[str, Any]) -> Response:
        if body.get("stream"):
            return StreamingResponse(_broken("the prompt does not fit"), media_type="text/event-stream")
        max_tokens = int(body.get("max_tokens") or 16)
        return JSONResponse(
            {
                "error": {
                    "message": (
                        f"This model's maximum context length is {self.server.context_tokens} tokens, however "
                        f"you requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in your "
                        f"prompt; {max_tokens} for the completion). Please reduce your prompt; or "
                        "completion length."
                    ),
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            },
            400,
        )

    @staticmethod
    async def _stream(
        head: dict[str, Any],
        generated: Generated,
        usage: dict[str, Any] | None,
        timings: dict[str, Any] | None = None,
    ) -> AsyncIterator[bytes]:
        """Server-sent events as vLLM sends them: text pieces, the finish reason, usage, [DONE];
        as llama-server does, the finish reason comes with usage and timings."""

        def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            return f"data: {json.dumps({**head, 'choices': choices, **extra})}\n\n".encode()

        for start in range(0, len(generated.text), 4):
            piece = generated.text[start : start + 4]
            yield event([{"index": 0, "text": piece, "logprobs": None, "finish_reason": None}])
        finish = [{"index": 0, "text": "", "logprobs": None, "finish_reason": generated.finish_reason}]
        if timings is not None:
            yield event(finish, usage=usage, timings=timings)
        else:
            yield event(finish)
            if usage is not None:
                yield event([], usage=usage)
        yield b"data: [DONE]\n\n"


async def _broken(why: str) -> AsyncIterator[bytes]:
    """A stream that breaks off before its first event (the server's task raised)."""
    raise RuntimeError(f"fake runtime: {why} (stream broken off)")
    yield b""  # pragma: no cover - makes this an async generator


async def _interrupted() -> AsyncIterator[bytes]:
    """What llama_cpp.server streams when another request cuts a generation off: [DONE] alone."""
    yield b"data: [DONE]\n\n"
