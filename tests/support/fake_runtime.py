"""Fake Ollama and OpenAI-compatible runtimes: real HTTP on 127.0.0.1, answers from a policy.

One FakeServer speaks both APIs (Ollama under /api, OpenAI under /v1); `url` is the address a
client is given (the root for Ollama, root + "/v1" for OpenAI). It runs uvicorn in a
background thread, records every request, the requests in their scripted delay (`generating`:
a test cancels a call once its request is there, never after a fixed time, which a busy machine
may not have reached the request by) and those whose client went away while the delay was
running (`disconnects`), which is how tests see cancellation. `hold()` makes every generation
wait, after its delay, until `release()`: a test that needs questions in flight while it does
something keeps them there for as long as it takes, not for a delay it hopes is long enough.
The routes of each API are in fake_ollama.py and fake_openai.py.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request

from agent.backends.base import PROBE_PROMPT
from agent.commands.cache_probe import CACHE_PROBE_MARK
from agent.commands.doctor import TOOL_CHECK_QUESTION
from tests.support.fake_ollama import OLLAMA_VERSION, OllamaApi
from tests.support.fake_openai import OpenAIApi
from tests.support.policies import DEFAULT_MODEL, Policy, PromptCache, ScriptedReply, count_tokens, policy_reply

_STARTUP_SECONDS = 10.0


# What the trained agent replies to doctor's one question: a short think, then a tool call.
TOOL_CHECK_CALL = '<think>I need the table names.</think>\n{"tool": "list_tables", "args": {}}'


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request as the fake received it."""

    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: Any  # decoded JSON, the raw text when it is not JSON, None when empty
    peer: tuple[str, int] | None = None  # the client's address and port: one per connection


class FakeServer:
    """A fake model runtime over real HTTP; `start()` it, `stop()` it (fixtures do both)."""

    def __init__(self, policy: Policy, **options: Any) -> None:
        """A server answering with `policy`; `options` are those of `configure`."""
        self._changed = threading.Condition()
        self._released = threading.Event()  # cleared by hold(): generations wait for release()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.root = ""
        self.configure(policy, **options)

    def configure(
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
        llama_cpp_python: bool = False,
        interrupt_requests: bool = True,
        crash_on_completion: bool = False,
        ollama_version: str = OLLAMA_VERSION,
        vllm: bool = False,
        prompt_tokens_details: bool = False,
        reprocesses: bool = False,
        tool_check_reply: str = TOOL_CHECK_CALL,
    ) -> FakeServer:
        """Answer with `policy` and these options from now on, with nothing recorded yet.

        A pooled server (FakeServerPool) is configured afresh for each test that borrows it.
        """
        # /v1 answers as llama_cpp.server: its OpenAPI title, any model name served (`models` is
        # what /v1/models lists), one request at a time; with `interrupt_requests` (its default)
        # a request arriving while another is generating ends that one's stream early.
        self.llama_cpp_python = llama_cpp_python
        self.interrupt_requests = interrupt_requests
        # /v1/models answers, every /v1/completions breaks off: an engine that dies generating.
        self.crash_on_completion = crash_on_completion
        self.policy = policy
        self.models = tuple(models)
        self.api_key = api_key  # required on /v1 routes when set
        self.url_path = url_path
        self.show_overrides = dict(show_overrides or {})
        self.total_slots = total_slots  # GET /props answers it as llama-server does; None: 404
        # /v1 prompts of this many tokens or more fail as in llama_cpp.server: a 400 unstreamed,
        # a stream that breaks off once started.
        self.context_tokens = context_tokens
        # What each engine reports about its prompt cache, keyed on what it is and what a request
        # asks: Ollama's prompt_eval_cached_count from `ollama_version` 0.33.3 on; llama-server
        # (`total_slots` set) its `timings` and usage.prompt_tokens_details; vLLM (`vllm`: /version,
        # max_model_len in /v1/models) usage.prompt_tokens_details only when started with
        # `prompt_tokens_details` (--enable-prompt-tokens-details) and, streamed, when the request
        # sets stream_options.include_usage. `reprocesses`: an engine that evaluates every prompt
        # whole (it reports 0 tokens from its cache).
        self.ollama_version = ollama_version
        self.vllm = vllm
        self.prompt_tokens_details = prompt_tokens_details
        self.reprocesses = reprocesses
        self.tool_check_reply = tool_check_reply  # the reply to doctor's one question
        self._released.set()  # a held generation of the test before ends
        self.requests: list[RecordedRequest] = []
        self.generating: list[RecordedRequest] = []  # requests that reached their scripted delay
        self.disconnects: list[RecordedRequest] = []
        self.policy_errors: list[Exception] = []  # a policy that raised: a bug in the test
        self._prompt_cache = prompt_cache
        self._caches: dict[str, PromptCache] = {}
        return self

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
            self.app(),
            log_config=None,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [sock]},
            name=f"fake-runtime {self.root}",
            daemon=True,
        )
        self._thread.start()
        deadline = time.monotonic() + _STARTUP_SECONDS
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the fake runtime at {self.root} did not start")
            time.sleep(0.01)
        return self

    @property
    def serving(self) -> bool:
        """Whether the server was started and has not been told to stop."""
        return (
            self._server is not None
            and self._thread is not None
            and self._thread.is_alive()
            and not self._server.should_exit
        )

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

    def hold(self) -> None:
        """From now on every generation waits (after its delay) until `release()`."""
        self._released.clear()

    def release(self) -> None:
        """Let the held generations, and every later one, finish."""
        self._released.set()

    async def await_generating(self, count: int = 1, timeout: float = 60.0) -> None:
        """Return once `count` requests are in their scripted delay; AssertionError after `timeout`."""
        with anyio.move_on_after(timeout):
            while len(self.generating) < count:
                await anyio.sleep(0.005)
            return
        raise AssertionError(
            f"{len(self.generating)} of {count} requests reached the fake runtime's "
            f"scripted delay within {timeout:g} s"
        )

    async def cancel_when_generating(self, call: Callable[[], Awaitable[object]], count: int = 1) -> None:
        """Run `call` until `count` of its requests are in their scripted delay here, then cancel it.

        The cancel lands while the runtime 'generates', however long the call took to get there.
        """
        async with anyio.create_task_group() as group:
            group.start_soon(call)
            await self.await_generating(count)
            group.cancel_scope.cancel()

    def bodies(self, path: str) -> list[Any]:
        """The JSON bodies received on `path`, in order (e.g. "/api/generate")."""
        return [r.body for r in self.requests if r.path == path]

    # ---- the ASGI app, and what both APIs do with a request ------------------------------

    def app(self) -> Starlette:
        """Both APIs as a Starlette app."""
        return Starlette(routes=[*OllamaApi(self).routes(), *OpenAIApi(self).routes()])

    async def record(self, request: Request) -> RecordedRequest:
        """Read, decode and keep the request."""
        raw = await request.body()
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        recorded = RecordedRequest(
            request.method,
            request.url.path,
            {k.lower(): v for k, v in request.headers.items()},
            body,
            (request.client.host, request.client.port) if request.client else None,
        )
        self.requests.append(recorded)
        return recorded

    def ask_policy(self, prompt: str, model: str, seed: int | None) -> ScriptedReply:
        """The policy's reply; if the policy raises, a 500 naming the error (kept for stop()).

        The one-token check that the engine generates (doctor's) is answered as any model would,
        doctor's one question (does the model call a tool?) with `tool_check_reply`.
        """
        if prompt == PROBE_PROMPT or CACHE_PROBE_MARK in prompt:
            return ScriptedReply("OK")
        if TOOL_CHECK_QUESTION in prompt:
            return ScriptedReply(self.tool_check_reply)
        try:
            return policy_reply(self.policy, prompt, model, seed)
        except Exception as exc:  # recorded and re-raised by stop(): the test fails visibly
            self.policy_errors.append(exc)
            return ScriptedReply(
                f"fake runtime: the policy raised {type(exc).__name__}: {exc}", http_status=500
            )

    async def run_delay(self, request: Request, recorded: RecordedRequest, delay: float) -> bool:
        """Sleep `delay`, then wait while held, unless the client disconnects first; True (and
        recorded) if it did."""
        if delay <= 0 and self._released.is_set():
            return False
        disconnects = self.disconnects  # this test's list, even if the server is lent on meanwhile
        self.generating.append(recorded)
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
            while not self._released.is_set():
                await anyio.sleep(0.01)
            group.cancel_scope.cancel()
        if disconnected:
            with self._changed:
                disconnects.append(recorded)
                self._changed.notify_all()
        return disconnected

    def prompt_tokens(self, model: str, prompt: str, completion: str) -> int:
        """The prompt's tokens as the runtime counts them: all, or only the uncached ones."""
        return self.prompt_counts(model, prompt, completion)[0]

    def prompt_counts(self, model: str, prompt: str, completion: str) -> tuple[int, int]:
        """(the prompt's tokens as the runtime counts them, the tokens it served from its cache).

        With `prompt_cache` the count is of the uncached tokens only (old Ollama); a `reprocesses`
        engine serves nothing from its cache.
        """
        cache = self._caches.setdefault(model, PromptCache())
        new = cache.new_tokens(prompt)
        cache.remember(prompt + completion)
        whole = count_tokens(prompt)
        cached = 0 if self.reprocesses else max(0, whole - new)
        return (new if self._prompt_cache else whole), cached
