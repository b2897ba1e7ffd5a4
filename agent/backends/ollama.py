"""ModelBackend on a local Ollama server: raw ChatML in through /api/generate, text out."""

from __future__ import annotations

import json
import os
import re
import time
import urllib.parse
from collections.abc import Awaitable, Mapping
from contextvars import ContextVar
from typing import Any, TypeVar

import httpx
import ollama
import pydantic

from ..errors import BackendError, BackendResponseError, BackendUnreachable, ConfigError, ModelNotFound
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
    parameter_warnings,
    release_facts,
)

DEFAULT_OLLAMA_HOST = "http://127.0.0.1:11434"
_OLLAMA_PORT = 11434
# Ollama's keep_alive: seconds as a number, or a Go duration such as 30m, 1h30m, -1m.
_SECONDS = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)$")
GO_DURATION = re.compile(r"^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))+$")
KEEP_ALIVE_HINT = "not a duration; give seconds (300, -1 for ever) or a number with a unit: 30m, 1h, 90s"
# ollama-python (0.6) drops the fields of an answer it does not know, prompt_eval_cached_count
# among them: a response hook keeps the body of this task's /api/generate answer here.
_GENERATE_BODIES: ContextVar[list[dict[str, Any]] | None] = ContextVar("ollama_generate_bodies",
                                                                      default=None)

_T = TypeVar("_T")


_HOSTNAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def is_keep_alive(text: str) -> bool:
    """Whether `text` is a keep_alive Ollama accepts: seconds, or a number with a unit (30m, 1h)."""
    return bool(_SECONDS.match(text.strip()) or GO_DURATION.match(text.strip()))


def ollama_keep_alive(value: str | float | None) -> str | float | None:
    """Ollama's keep_alive: a bare number is seconds (-1: keep loaded), else a duration like 30m.

    Raises ConfigError for anything Ollama would refuse (e.g. "forever").
    """
    if not isinstance(value, str):
        return value
    text = value.strip()
    try:
        return float(text) if "." in text else int(text)
    except ValueError:
        pass
    if not GO_DURATION.match(text):
        raise ConfigError(f"--keep-alive {value!r}: {KEEP_ALIVE_HINT}")
    return text


def resolve_ollama_host(explicit: str | None) -> str:
    """The Ollama URL to use: the argument, else $OLLAMA_HOST, else http://127.0.0.1:11434."""
    for candidate in (explicit, os.environ.get("OLLAMA_HOST")):
        if candidate is not None and candidate.strip():
            return _normalise_host(candidate.strip())
    return DEFAULT_OLLAMA_HOST


def _normalise_host(host: str) -> str:
    """Spell a host the way Ollama's own client reads it (scheme and port filled in)."""
    scheme, sep, rest = host.partition("://")
    if not sep:
        scheme, rest, default_port = "http", host, _OLLAMA_PORT
    else:
        default_port = {"http": 80, "https": 443}.get(scheme.lower(), _OLLAMA_PORT)
    if scheme.lower() not in ("http", "https"):
        raise ConfigError(
            f"Ollama host {host!r} has the scheme {scheme!r}; "
            "give http://HOST:PORT or https://HOST:PORT (for example http://127.0.0.1:11434)."
        )
    try:
        split = urllib.parse.urlsplit(f"{scheme}://{rest}")
        port = split.port or default_port
    except ValueError as exc:
        raise ConfigError(
            f"Ollama host {host!r} is not a valid address ({exc}); "
            "give HOST:PORT or a URL like http://127.0.0.1:11434."
        ) from exc
    hostname = split.hostname or "127.0.0.1"
    if not (_HOSTNAME.match(hostname) or ":" in hostname) or split.query or split.fragment:
        raise ConfigError(
            f"Ollama host {host!r} is not a valid address; "
            "give HOST:PORT or a URL like http://127.0.0.1:11434."
        )
    if ":" in hostname:  # IPv6 literal: urlsplit drops the brackets
        hostname = f"[{hostname}]"
    path = split.path.rstrip("/")
    return f"{scheme.lower()}://{hostname}:{port}{path}"


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
        self._client = ollama.AsyncClient(
            host=self.host,
            timeout=client_timeout(timeout),
            event_hooks={"response": [_keep_generate_body]},  # passed on to httpx
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
        source = (f"num_ctx {self.num_ctx} sent with every request" if context == self.num_ctx
                  else "the model's context_length (/api/show), below the num_ctx sent")
        return (EngineFacts(where=self.host, engine=OLLAMA, version=version, context_tokens=context,
                            context_source=source, notes=tuple(notes), warnings=tuple(warnings)),)

    async def _version(self) -> str | None:
        """GET /api/version; None when Ollama does not answer it."""
        try:
            async with httpx.AsyncClient(timeout=client_timeout(CONNECT_TIMEOUT)) as http:
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
        notes = () if template.strip() in ("{{ .Prompt }}", "") else (
            "its TEMPLATE is not the raw `{{ .Prompt }}` of our Modelfile; raw requests bypass it, "
            "but re-create the model with `ollama create ... -f Modelfile` to be sure",)
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
            raise timed_out(f"Ollama at {self.host}", self.timeout, self.model,
                            ". The model may still be loading or the machine is busy") from exc
        except httpx.TransportError as exc:
            raise BackendResponseError(
                f"The connection to Ollama at {self.host} broke during the request "
                f"({type(exc).__name__}: {exc}); check the `ollama serve` log (a crash or running "
                "out of memory) and retry."
            ) from exc
        except (json.JSONDecodeError, pydantic.ValidationError) as exc:
            raise BackendResponseError(
                f"The server at {self.host} sent a reply that is not Ollama's ({exc}); check that "
                "--ollama-host / OLLAMA_HOST points at `ollama serve`."
            ) from exc

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
                f"with `ollama create {self.model} -f Modelfile` (see README.md, \"Getting the "
                "model into Ollama\"), or pass an installed model's name with --model "
                "(`ollama list` shows them)."
            )
        if exc.status_code == 404:
            return BackendResponseError(
                f"{self.host} answered 404 ({message}): it does not look like an Ollama server. "
                "Check --ollama-host / OLLAMA_HOST (the default is http://127.0.0.1:11434)."
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

