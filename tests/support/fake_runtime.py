"""Fake Ollama and OpenAI-compatible runtimes: real HTTP on 127.0.0.1, answers from a policy.

One FakeServer speaks both APIs (Ollama under /api, OpenAI under /v1); `url` is the address a
client is given (the root for Ollama, root + "/v1" for OpenAI). It runs uvicorn in a
background thread, records every request, and records requests whose client went away
while the scripted delay was running (`disconnects`), which is how tests see cancellation.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from agent.backends.base import STOP_STRINGS
from tests.support.policies import (
    DEFAULT_MODEL,
    Generated,
    Policy,
    PromptCache,
    ScriptedReply,
    count_tokens,
    generate,
    policy_reply,
)

OLLAMA_VERSION = "0.12.6"
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
_STARTUP_SECONDS = 10.0


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request as the fake received it."""

    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: Any  # decoded JSON, the raw text when it is not JSON, None when empty


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def _ollama_name(name: str) -> str:
    """Ollama treats `x` and `x:latest` as the same model."""
    return name if ":" in name else f"{name}:latest"


class FakeServer:
    """A fake model runtime over real HTTP; `start()` it, `stop()` it (fixtures do both)."""

    def __init__(
        self,
        policy: Policy,
        *,
        models: Sequence[str] = (DEFAULT_MODEL,),
        api_key: str | None = None,
        prompt_cache: bool = False,
        url_path: str = "",
        show_overrides: Mapping[str, Any] | None = None,
        total_slots: int | None = None,
        context_tokens: int | None = None,
    ) -> None:
        self.policy = policy
        self.models = tuple(models)
        self.api_key = api_key  # required on /v1 routes when set
        self.url_path = url_path
        self.show_overrides = dict(show_overrides or {})
        self.total_slots = total_slots  # GET /props answers it as llama-server does; None: 404
        # /v1 prompts of this many tokens or more fail as in llama_cpp.server: a 400 unstreamed,
        # a stream that breaks off once started.
        self.context_tokens = context_tokens
        self.requests: list[RecordedRequest] = []
        self.disconnects: list[RecordedRequest] = []
        self.policy_errors: list[Exception] = []  # a policy that raised: a bug in the test
        self._prompt_cache = prompt_cache
        self._caches: dict[str, PromptCache] = {}
        self._changed = threading.Condition()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.root = ""

    @property
    def url(self) -> str:
        """The address to give a client (root for Ollama, root/v1 for OpenAI)."""
        return self.root + self.url_path

    # ---- lifecycle -----------------------------------------------------------------------

    def start(self) -> FakeServer:
        """Serve on a free 127.0.0.1 port in a background thread; returns self once listening."""
        # proto IPPROTO_TCP (not the default 0) so asyncio sets TCP_NODELAY on accepted
        # connections; without it every keep-alive request stalls ~40 ms on delayed ACKs.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        self.root = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(
            self.app(), log_config=None, log_level="warning", access_log=False,
            lifespan="off", timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name=f"fake-runtime {self.root}",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + _STARTUP_SECONDS
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the fake runtime at {self.root} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Shut the server down and wait for its thread; re-raise the first policy error."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        if self.policy_errors:
            raise self.policy_errors[0]

    def wait_for_disconnects(self, count: int = 1, timeout: float = 5.0) -> bool:
        """Block until at least `count` disconnects were recorded; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self.disconnects) >= count, timeout)

    async def await_disconnects(self, count: int = 1, timeout: float = 5.0) -> bool:
        """wait_for_disconnects without blocking the caller's event loop."""
        return await anyio.to_thread.run_sync(self.wait_for_disconnects, count, timeout)

    def bodies(self, path: str) -> list[Any]:
        """The JSON bodies received on `path`, in order (e.g. "/api/generate")."""
        return [r.body for r in self.requests if r.path == path]

    # ---- the ASGI app --------------------------------------------------------------------

    def app(self) -> Starlette:
        """Both APIs as a Starlette app."""
        return Starlette(routes=[
            Route("/", self._root, methods=["GET", "HEAD"]),
            Route("/api/version", self._version, methods=["GET"]),
            Route("/api/tags", self._tags, methods=["GET"]),
            Route("/api/show", self._show, methods=["POST"]),
            Route("/api/generate", self._generate, methods=["POST"]),
            Route("/v1/models", self._openai_models, methods=["GET"]),
            Route("/v1/completions", self._openai_completions, methods=["POST"]),
            Route("/props", self._props, methods=["GET"]),
        ])

    async def _record(self, request: Request) -> RecordedRequest:
        raw = await request.body()
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        recorded = RecordedRequest(
            request.method, request.url.path, {k.lower(): v for k, v in request.headers.items()},
            body,
        )
        self.requests.append(recorded)
        return recorded

    def _ask_policy(self, prompt: str, model: str, seed: int | None) -> ScriptedReply:
        """The policy's reply; if the policy raises, a 500 naming the error (kept for stop())."""
        try:
            return policy_reply(self.policy, prompt, model, seed)
        except Exception as exc:  # recorded and re-raised by stop(): the test fails visibly
            self.policy_errors.append(exc)
            return ScriptedReply(f"fake runtime: the policy raised {type(exc).__name__}: {exc}",
                                 http_status=500)

    async def _run_delay(self, request: Request, recorded: RecordedRequest, delay: float) -> bool:
        """Sleep `delay` unless the client disconnects first; True (and recorded) if it did."""
        if delay <= 0:
            return False
        disconnected = False
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                nonlocal disconnected
                while (await request.receive())["type"] != "http.disconnect":
                    pass
                disconnected = True
                group.cancel_scope.cancel()

            group.start_soon(watch)
            await anyio.sleep(delay)
            group.cancel_scope.cancel()
        if disconnected:
            with self._changed:
                self.disconnects.append(recorded)
                self._changed.notify_all()
        return disconnected

    def _prompt_tokens(self, model: str, prompt: str, completion: str) -> int:
        if not self._prompt_cache:
            return count_tokens(prompt)
        cache = self._caches.setdefault(model, PromptCache())
        tokens = cache.new_tokens(prompt)
        cache.remember(prompt + completion)
        return tokens

    # ---- Ollama --------------------------------------------------------------------------

    def _ollama_knows(self, model: str) -> bool:
        return _ollama_name(model) in {_ollama_name(m) for m in self.models}

    @staticmethod
    def _ollama_missing(model: str) -> JSONResponse:
        return JSONResponse({"error": f'model "{model}" not found, try pulling it first'}, 404)

    async def _root(self, request: Request) -> Response:
        await self._record(request)
        return PlainTextResponse("Ollama is running")

    async def _version(self, request: Request) -> Response:
        await self._record(request)
        return JSONResponse({"version": OLLAMA_VERSION})

    async def _tags(self, request: Request) -> Response:
        await self._record(request)
        return JSONResponse({"models": [
            {
                "name": _ollama_name(m), "model": _ollama_name(m), "modified_at": _now(),
                "size": 2_000_000_000, "digest": hashlib.sha256(m.encode()).hexdigest(),
                "details": _DETAILS,
            }
            for m in self.models
        ]})

    async def _show(self, request: Request) -> Response:
        body = (await self._record(request)).body or {}
        model = body.get("model") or body.get("name") or ""
        if not self._ollama_knows(model):
            return self._ollama_missing(model)
        shown = {
            "license": "Apache License, Version 2.0",
            "modelfile": f"FROM /models/{model}.gguf\nTEMPLATE {{{{ .Prompt }}}}\n",
            "parameters": SHOW_PARAMETERS,
            "template": "{{ .Prompt }}",
            "details": _DETAILS,
            "model_info": {"general.architecture": "qwen35", "general.parameter_count": 2_000_000_000},
            "capabilities": ["completion"],
            "modified_at": _now(),
        }
        return JSONResponse({**shown, **self.show_overrides})

    async def _generate(self, request: Request) -> Response:
        recorded = await self._record(request)
        body = recorded.body if isinstance(recorded.body, dict) else {}
        model = body.get("model") or ""
        if not model:
            return JSONResponse({"error": "model is required"}, 400)
        if not self._ollama_knows(model):
            return self._ollama_missing(model)
        options = body.get("options") or {}
        prompt = body.get("prompt") or ""
        reply = self._ask_policy(prompt, model, options.get("seed"))
        if await self._run_delay(request, recorded, reply.delay):
            return Response(status_code=499)  # nobody is listening any more
        if reply.http_status != 200:
            return JSONResponse({"error": reply.text}, reply.http_status)
        generated = generate(
            reply, max_tokens=options.get("num_predict"),
            stops=[*STOP_STRINGS, *(options.get("stop") or [])],
        )
        final = self._ollama_final(model, prompt, generated, reply)
        if body.get("stream", True) is False:
            return JSONResponse({**final, "response": generated.text})
        return StreamingResponse(
            self._ollama_stream(model, generated.text, final), media_type="application/x-ndjson"
        )

    def _ollama_final(
        self, model: str, prompt: str, generated: Generated, reply: ScriptedReply
    ) -> dict[str, Any]:
        nanos = int(reply.delay * 1e9)
        return {
            "model": model, "created_at": _now(), "response": "", "done": True,
            "done_reason": generated.finish_reason, "total_duration": nanos, "load_duration": 0,
            "prompt_eval_count": self._prompt_tokens(model, prompt, generated.text),
            "prompt_eval_duration": nanos // 4,
            "eval_count": generated.completion_tokens, "eval_duration": nanos - nanos // 4,
        }

    @staticmethod
    async def _ollama_stream(model: str, text: str, final: dict[str, Any]) -> AsyncIterator[bytes]:
        for start in range(0, len(text), 4):
            piece = {"model": model, "created_at": _now(), "response": text[start:start + 4],
                     "done": False}
            yield (json.dumps(piece) + "\n").encode()
        yield (json.dumps(final) + "\n").encode()

    # ---- OpenAI-compatible ---------------------------------------------------------------

    def _openai_refused(self, recorded: RecordedRequest) -> JSONResponse | None:
        if self.api_key is None or recorded.headers.get("authorization") == f"Bearer {self.api_key}":
            return None
        return JSONResponse({"error": "Unauthorized"}, 401)  # what vLLM's --api-key answers

    async def _openai_models(self, request: Request) -> Response:
        recorded = await self._record(request)
        if (refused := self._openai_refused(recorded)) is not None:
            return refused
        return JSONResponse({"object": "list", "data": [
            {"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models
        ]})

    async def _props(self, request: Request) -> Response:
        await self._record(request)
        if self.total_slots is None:
            return JSONResponse({"detail": "Not Found"}, 404)
        return JSONResponse({"total_slots": self.total_slots, "model_path": "/models/fake.gguf"})

    async def _openai_completions(self, request: Request) -> Response:
        recorded = await self._record(request)
        if (refused := self._openai_refused(recorded)) is not None:
            return refused
        body = recorded.body if isinstance(recorded.body, dict) else {}
        model = body.get("model") or ""
        if model not in self.models:
            return JSONResponse({
                "object": "error", "message": f"The model `{model}` does not exist.",
                "type": "NotFoundError", "param": None, "code": 404,
            }, 404)
        prompt = body.get("prompt") if isinstance(body.get("prompt"), str) else ""
        if self.context_tokens is not None and count_tokens(prompt) >= self.context_tokens:
            return self._context_exceeded(count_tokens(prompt), body)
        reply = self._ask_policy(prompt, model, body.get("seed"))
        if await self._run_delay(request, recorded, reply.delay):
            return Response(status_code=499)
        if reply.http_status != 200:
            return JSONResponse({
                "object": "error", "message": reply.text, "type": "InternalServerError",
                "param": None, "code": reply.http_status,
            }, reply.http_status)
        stop = body.get("stop") or []
        generated = generate(
            reply, max_tokens=body.get("max_tokens", 16),  # 16: the API's documented default
            stops=[*STOP_STRINGS, *([stop] if isinstance(stop, str) else stop)],
        )
        prompt_tokens = self._prompt_tokens(model, prompt, generated.text)
        head = {"id": f"cmpl-{len(self.requests)}", "object": "text_completion",
                "created": int(time.time()), "model": model}
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": generated.completion_tokens,
                 "total_tokens": prompt_tokens + generated.completion_tokens}
        if body.get("stream"):
            options = body.get("stream_options") or {}
            with_usage = bool(options.get("include_usage")) if isinstance(options, dict) else False
            return StreamingResponse(self._openai_stream(head, generated, usage if with_usage else None),
                                     media_type="text/event-stream")
        return JSONResponse({
            **head,
            "choices": [{"index": 0, "text": generated.text, "logprobs": None,
                         "finish_reason": generated.finish_reason}],
            "usage": usage,
        })

    def _context_exceeded(self, prompt_tokens: int, body: dict[str, Any]) -> Response:
        if body.get("stream"):
            async def broken() -> AsyncIterator[bytes]:
                raise RuntimeError("fake runtime: the prompt does not fit (stream broken off)")
                yield b""  # pragma: no cover - makes this an async generator

            return StreamingResponse(broken(), media_type="text/event-stream")
        max_tokens = int(body.get("max_tokens") or 16)
        return JSONResponse({"error": {
            "message": f"This model's maximum context length is {self.context_tokens} tokens, however "
                       f"you requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} in your "
                       f"prompt; {max_tokens} for the completion). Please reduce your prompt; or "
                       "completion length.",
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded",
        }}, 400)

    @staticmethod
    async def _openai_stream(head: dict[str, Any], generated: Generated,
                             usage: dict[str, int] | None) -> AsyncIterator[bytes]:
        """Server-sent events as vLLM sends them: text pieces, the finish reason, usage, [DONE]."""
        def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            return f"data: {json.dumps({**head, 'choices': choices, **extra})}\n\n".encode()

        for start in range(0, len(generated.text), 4):
            piece = generated.text[start:start + 4]
            yield event([{"index": 0, "text": piece, "logprobs": None, "finish_reason": None}])
        yield event([{"index": 0, "text": "", "logprobs": None, "finish_reason": generated.finish_reason}])
        if usage is not None:
            yield event([], usage=usage)
        yield b"data: [DONE]\n\n"
