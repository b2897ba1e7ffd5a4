"""ModelBackend on a local Ollama server: raw ChatML in through /api/generate, text out."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Mapping
from contextvars import ContextVar
from typing import Any, TypeVar

import httpx
import ollama
import pydantic

from ..errors import BackendError, BackendResponseError, BackendUnreachable, ModelNotFound
from ._http import CONNECT_TIMEOUT, client_timeout, timed_out
from .base import (
    STOP_STRINGS,
    VLLM_NEUTRAL_SAMPLERS,
    Completion,
    EngineFacts,
    ModelBackend,
    ModelInfo,
    SamplingSettings,
    SlotChoice,
    seeded_copy,
)
from .ollama_facts import (
    DEFAULT_NUM_CTX,
    OLLAMA,
    OLLAMA_PARALLEL_ENV,
    context_length,
    ollama_keep_alive,
    parameter_warnings,
    release_facts,
    resolve_ollama_host,
)

# ollama-python (0.6) drops the fields of an answer it does not know, prompt_eval_cached_count
# among them: a response hook keeps the body of this task's /api/generate answer here.
_GENERATE_BODIES: ContextVar[list[dict[str, Any]] | None] = ContextVar("ollama_generate_bodies", default=None)

_T = TypeVar("_T")


class OllamaBackend(ModelBackend):
    """Completes raw ChatML prompts with an Ollama model (raw=True: no template applied)."""

    def __init__(
        self,
        model: str,
        *,
        host: str | None = None,
        sampling: SamplingSettings = SamplingSettings(),  # noqa: B008 - frozen dataclass
        num_ctx: int = DEFAULT_NUM_CTX,
        keep_alive: str | float | None = None,
        timeout: float = 300.0,
    ) -> None:
        self.model = model
        self.host = resolve_ollama_host(host)
        self.sampling = sampling
        self.num_ctx = num_ctx
        self.keep_alive = ollama_keep_alive(keep_alive)
        self.timeout = timeout
        # One TLS context for both clients (this one and /api/version's): loading the CA bundle
        # takes longer than the whole exchange with a local Ollama, and the server waits for it.
        self._tls = httpx.create_ssl_context()
        self._client = ollama.AsyncClient(
            host=self.host,
            timeout=client_timeout(timeout),
            event_hooks={"response": [_keep_generate_body]},  # passed on to httpx
            verify=self._tls,
        )

    def with_seed(self, seed: int) -> OllamaBackend:
        """This backend sampling with `seed`, on the same client (close only the original)."""
        return seeded_copy(self, seed)

    @property
    def where(self) -> str:
        """The Ollama host in use."""
        return self.host

    @property
    def replica_label(self) -> str:
        """One Ollama, one label: its host."""
        return self.host

    def default_slots(self, environ: Mapping[str, str]) -> SlotChoice:
        """OLLAMA_NUM_PARALLEL when this environment sets it (as the server's likely does), else 1."""
        value = environ.get(OLLAMA_PARALLEL_ENV, "").strip()
        if value.isdigit() and int(value) >= 1:
            return SlotChoice(int(value), f"{OLLAMA_PARALLEL_ENV}={value} in this environment")
        return SlotChoice(1, f"Ollama's one slot per model ({OLLAMA_PARALLEL_ENV} is not set here)")

    async def engine_facts(self) -> tuple[EngineFacts, ...]:
        """Ollama's version (/api/version), the model's parameters and context (/api/show), and the
        traps they reveal; it does not say its parallelism over HTTP (OLLAMA_NUM_PARALLEL)."""
        version = await self._version()
        warnings, notes = release_facts(version)
        context = self.num_ctx
        try:
            shown = await self._call(self._client.show(self.model))
        except BackendError:
            shown = None  # describe_model says why; the facts stay what Ollama said
        if shown is not None:
            warnings += parameter_warnings(shown.parameters or "")
            trained = context_length(shown.modelinfo or {})
            if trained is not None and trained < context:
                context = trained
        source = (
            f"num_ctx {self.num_ctx} sent with every request"
            if context == self.num_ctx
            else "the model's context_length (/api/show), below the num_ctx sent"
        )
        return (
            EngineFacts(
                where=self.host,
                engine=OLLAMA,
                version=version,
                context_tokens=context,
                context_source=source,
                notes=tuple(notes),
                warnings=tuple(warnings),
            ),
        )

    async def _version(self) -> str | None:
        """GET /api/version; None when Ollama does not answer it."""
        try:
            async with httpx.AsyncClient(timeout=client_timeout(CONNECT_TIMEOUT), verify=self._tls) as http:
                response = await http.get(f"{self.host}/api/version")
                payload = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        version = payload.get("version") if isinstance(payload, dict) else None
        return version if isinstance(version, str) and version else None

    def generate_options(self, max_tokens: int) -> dict[str, Any]:
        """The `options` object sent with every generate request (vLLM's neutral samplers included)."""
        options: dict[str, Any] = {
            "temperature": self.sampling.temperature,
            "top_p": self.sampling.top_p,
            "top_k": self.sampling.top_k,
            **VLLM_NEUTRAL_SAMPLERS,
            "num_ctx": self.num_ctx,
            "num_predict": max_tokens,
            "stop": list(STOP_STRINGS),
        }
        if self.sampling.seed is not None:
            options["seed"] = self.sampling.seed
        return options

    async def complete(self, prompt: str, *, max_tokens: int) -> Completion:
        """Continue `prompt` verbatim for at most `max_tokens` tokens."""
        started = time.perf_counter()
        bodies: list[dict[str, Any]] = []
        kept = _GENERATE_BODIES.set(bodies)
        try:
            response = await self._call(
                self._client.generate(
                    model=self.model,
                    prompt=prompt,
                    raw=True,
                    stream=False,
                    options=self.generate_options(max_tokens),
                    keep_alive=self.keep_alive,
                )
            )
        finally:
            _GENERATE_BODIES.reset(kept)
        if response.response is None:
            raise BackendResponseError(
                f"Ollama at {self.host} answered without any text for model '{self.model}' "
                f"(done_reason={response.done_reason!r}); check the `ollama serve` log and retry."
            )
        # prompt_eval_count is the whole prompt, cached tokens included (Ollama's
        # promptEvalCount() = cache_n + prompt_n); the cached share only where Ollama says it.
        cached = _cached_count(bodies[-1] if bodies else {})
        return Completion(
            text=response.response,
            prompt_tokens=response.prompt_eval_count or 0,
            completion_tokens=response.eval_count or 0,
            finish_reason="length" if response.done_reason == "length" else "stop",
            seconds=time.perf_counter() - started,
            cached_tokens=cached,
            details={"cache": "prompt_eval_cached_count"} if cached is not None else {},
        )

    async def describe_model(self) -> ModelInfo:
        """Ollama's description of the model (`ollama show`), for diagnostics."""
        shown = await self._call(self._client.show(self.model))
        details: dict[str, str] = {}
        if shown.details is not None:
            for key, value in shown.details.model_dump(exclude_none=True).items():
                details[key] = ", ".join(value) if isinstance(value, list | tuple) else str(value)
        template = shown.template or ""
        notes = (
            ()
            if template.strip() in ("{{ .Prompt }}", "")
            else (
                "its TEMPLATE is not the raw `{{ .Prompt }}` of our Modelfile; raw requests bypass it, "
                "but re-create the model with `ollama create ... -f Modelfile` to be sure",
            )
        )
        return ModelInfo(
            name=self.model,
            parameters=shown.parameters or "",
            template=template,
            details=details,
            capabilities=tuple(shown.capabilities or ()),
            notes=notes,
        )

    async def aclose(self) -> None:
        """Close the HTTP connections to Ollama."""
        await self._client.close()

    async def _call(self, request: Awaitable[_T]) -> _T:
        """Await an ollama-client call, translating its failures into BackendError."""
        try:
            return await request
        except ollama.ResponseError as exc:
            raise self._response_error(exc) from exc
        except ConnectionError as exc:  # the ollama client's translation of httpx.ConnectError
            raise self._unreachable("connection refused or host unknown") from exc
        except httpx.ConnectTimeout as exc:
            raise self._unreachable(f"no answer to the connection within {CONNECT_TIMEOUT:g} s") from exc
        except httpx.TimeoutException as exc:
            raise timed_out(
                f"Ollama at {self.host}",
                self.timeout,
                self.model,
                ". The model may still be loading or the machine is busy",
            ) from exc
        except httpx.TransportError as exc:
            raise BackendResponseError(
                f"The connection to Ollama at {self.host} broke during the request "
                f"({type(exc).__name__}: {exc}); check the `ollama serve` log (a crash or running "
                "out of memory) and retry."
            ) from exc
        except (json.JSONDecodeError, pydantic.ValidationError) as exc:
            raise BackendResponseError(
                f"The server at {self.host} sent a reply that is not Ollama's ({exc}). "
                f"{self._other_engine_hint()}"
            ) from exc

    def _other_engine_hint(self) -> str:
        """What to do when the address answers, but not as Ollama: most often an OpenAI-compatible engine."""
        base = self.host.rstrip("/")
        base = base if base.endswith("/v1") else f"{base}/v1"
        return (
            "If it is an OpenAI-compatible engine (llama.cpp's llama-server, vLLM, SGLang, python -m "
            f"llama_cpp.server), use --backend openai --base-url {base} instead of --ollama-host; "
            "otherwise check --ollama-host / OLLAMA_HOST (the default is http://127.0.0.1:11434)."
        )

    def _unreachable(self, detail: str) -> BackendUnreachable:
        return BackendUnreachable(
            f"Could not reach Ollama at {self.host} ({detail}). Start it with `ollama serve`, "
            "or give its address with --ollama-host or the OLLAMA_HOST environment variable."
        )

    def _response_error(self, exc: ollama.ResponseError) -> BackendError:
        message = str(exc.error)
        if "model" in message.lower() and (exc.status_code == 404 or "not found" in message):
            return ModelNotFound(
                f"Ollama at {self.host} has no model named '{self.model}' ({message}). Create it "
                f'with `ollama create {self.model} -f Modelfile` (see README.md, "Getting the '
                "model into Ollama\"), or pass an installed model's name with --model "
                "(`ollama list` shows them)."
            )
        if exc.status_code == 404:
            return BackendResponseError(
                f"{self.host} answered 404 ({message}): it does not look like an Ollama server. "
                f"{self._other_engine_hint()}"
            )
        return BackendResponseError(
            f"Ollama at {self.host} refused the request for model '{self.model}' "
            f"(HTTP {exc.status_code}): {message}. Check the `ollama serve` log; if the model "
            "fails to load, recreate it with `ollama create`."
        )


async def _keep_generate_body(response: httpx.Response) -> None:
    """Keep the JSON body of an /api/generate answer for the task that asked (see _GENERATE_BODIES)."""
    bodies = _GENERATE_BODIES.get()
    if bodies is None or not response.request.url.path.endswith("/api/generate") or response.status_code != 200:
        return
    await response.aread()  # httpx keeps the body: the ollama client reads it again
    try:
        payload = json.loads(response.content)
    except ValueError:
        return  # the ollama client reports what is wrong with the answer
    if isinstance(payload, dict):
        bodies.append(payload)


def _cached_count(body: Mapping[str, Any]) -> int | None:
    """Ollama's prompt_eval_cached_count (0.33.3+); None when it is absent or not a count."""
    value = body.get("prompt_eval_cached_count")
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
