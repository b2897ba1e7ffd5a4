"""ModelBackend on OpenAI-compatible /v1/completions servers (vLLM, SGLang, llama.cpp), with replicas."""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from ..errors import (
    BackendAuthError,
    BackendError,
    BackendResponseError,
    BackendUnreachable,
    ConfigError,
    ModelNotFound,
)
from ._http import CONNECT_TIMEOUT, client_timeout, describe_error, error_message, is_http_url, timed_out
from ._replicas import SLOTS_PER_REPLICA, PrefixAffinity, Replica, ReplicaPool, replicas_address
from .base import (
    PROBE_PROMPT,
    STOP_STRINGS,
    Completion,
    EngineFacts,
    ModelBackend,
    ModelInfo,
    SamplingSettings,
    SlotChoice,
    seeded_copy,
)
from .openai_engines import engine_facts, neutral_samplers
from .streaming import read_completion_stream

_ATTEMPTS = 2  # the first replica, then one retry on another healthy replica


class _ReplicaFailed(Exception):
    """This replica could not serve the request (connection or 5xx); another one may."""

    def __init__(self, reason: str, *, connection: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.connection = connection


class OpenAICompletionsBackend(ModelBackend):
    """Completes raw prompts through POST {base_url}/completions on the least busy replica."""

    def __init__(
        self,
        model: str,
        base_urls: Sequence[str],
        *,
        api_key: str | None,
        sampling: SamplingSettings = SamplingSettings(),  # noqa: B008 - frozen dataclass
        timeout: float = 300.0,
        failure_cooldown: float = 30.0,
        api_key_env: str | None = None,
    ) -> None:
        if isinstance(base_urls, str) or not base_urls:
            raise ConfigError(
                "The openai backend needs at least one base URL: pass --base-url "
                "http://HOST:PORT/v1 (repeat it for several replicas)."
            )
        for url in base_urls:
            if not is_http_url(url):
                raise ConfigError(
                    f"Base URL {url!r} must start with http:// or https:// "
                    "(for example http://127.0.0.1:8000/v1)."
                )
        self.model = model
        self.sampling = sampling
        self.timeout = timeout
        self.failure_cooldown = failure_cooldown
        self.api_key_env = api_key_env
        self._has_key = api_key is not None
        self._pool = ReplicaPool([url.rstrip("/") for url in base_urls], cooldown=failure_cooldown)
        # What each replica's engine said about itself (engine_facts), by base URL: it decides
        # how the neutral samplers are spelled. Shared by seeded and per-replica copies.
        self._facts: dict[str, EngineFacts] = {}
        self._affinity = PrefixAffinity()  # an episode's rounds stay on the replica caching their prefix
        headers = {"Authorization": f"Bearer {api_key}"} if api_key is not None else {}
        self._client = httpx.AsyncClient(
            timeout=client_timeout(timeout),
            headers=headers,
        )

    def with_seed(self, seed: int) -> OpenAICompletionsBackend:
        """This backend sampling with `seed`, on the same client and replicas (close only the original)."""
        return seeded_copy(self, seed)

    @property
    def base_urls(self) -> tuple[str, ...]:
        """The replicas, normalised (no trailing slash)."""
        return tuple(r.base_url for r in self._pool.replicas)

    @property
    def where(self) -> str:
        """The replicas' base URLs."""
        return replicas_address(self.base_urls)

    @property
    def replica_label(self) -> str:
        """The one replica, or "any" when a failed request may have tried several."""
        return self.base_urls[0] if len(self.base_urls) == 1 else "any"

    def default_slots(self, environ: Mapping[str, str]) -> SlotChoice:
        """SLOTS_PER_REPLICA for each replica: engines that do not say are taken to batch."""
        count = len(self.base_urls)
        return SlotChoice(
            SLOTS_PER_REPLICA * count,
            f"{SLOTS_PER_REPLICA} per replica for batching engines (vLLM, SGLang), "
            f"{count} {'replica' if count == 1 else 'replicas'}",
        )

    def per_replica(self) -> tuple[ModelBackend, ...]:
        """This backend once per replica, on the same client (close only the original)."""
        views = []
        for url in self.base_urls:
            view = copy.copy(self)
            view._pool = ReplicaPool([url], cooldown=self.failure_cooldown)
            views.append(view)
        return tuple(views)

    async def engine_facts(self) -> tuple[EngineFacts, ...]:
        """What each replica's engine says about itself (llama-server's /props, llama_cpp.server, vLLM)."""
        facts = tuple(
            [await engine_facts(self._client, url, CONNECT_TIMEOUT, self.model) for url in self.base_urls]
        )
        self.remember_engines(facts)
        return facts

    def remember_engines(self, facts: Sequence[EngineFacts]) -> None:
        """Know each replica's engine: it decides how the neutral samplers are spelled."""
        self._facts.update((f.where, f) for f in facts)

    def request_body(self, prompt: str, max_tokens: int, engine: str | None = None) -> dict[str, Any]:
        """The JSON body of one /completions request to `engine` (None: an engine not identified)."""
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": self.sampling.temperature,
            "top_p": self.sampling.top_p,
            "top_k": self.sampling.top_k,  # an extension vLLM, SGLang and llama.cpp accept
            # Sampled as in training, whatever the engine's own defaults (llama.cpp: min_p 0.05).
            **neutral_samplers(engine),
            "stop": list(STOP_STRINGS),
            # Streamed so that a cancelled request stops the generation: llama_cpp.server, for
            # one, notices a client that went away only between streamed tokens.
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.sampling.seed is not None:
            body["seed"] = self.sampling.seed
        return body

    async def complete(self, prompt: str, *, max_tokens: int) -> Completion:
        """Continue `prompt` verbatim on the least busy healthy replica, retrying once elsewhere."""
        started = time.perf_counter()
        any_connection_failure = False
        several = len(self._pool.replicas) > 1
        for replica in self._pool.attempts(_ATTEMPTS, self._affinity.replica_for(prompt) if several else None):
            told = self._facts.get(replica.base_url)
            body = self.request_body(prompt, max_tokens, told.engine if told is not None else None)
            try:
                completion = await self._stream_completion(replica, body, started)
                if several:
                    self._affinity.served(prompt, replica.base_url)
                return completion
            except _ReplicaFailed as failure:
                any_connection_failure |= failure.connection
                self._pool.mark_down(replica, failure.reason)
        raise self._all_failed(connection=any_connection_failure)

    async def describe_model(self) -> ModelInfo:
        """Check with GET {base_url}/models that every replica serves the model."""
        down: list[str] = []
        served_as: str | None = None
        connection = False
        for replica in self._pool.replicas:
            try:
                payload = await self._request(replica, "/models")
            except _ReplicaFailed as failure:
                self._pool.mark_down(replica, failure.reason)
                down.append(f"  {replica.base_url}: {failure.reason}")
                connection |= failure.connection
                continue
            data = payload.get("data")
            served = [str(m.get("id")) for m in data if isinstance(m, dict)] if isinstance(data, list) else []
            if self.model in served:
                continue
            # Only a problem if it matters: llama_cpp.server answers any name with its model.
            if not await self._answers_any_name(replica):
                raise ModelNotFound(
                    f"{replica.base_url} does not serve the model '{self.model}'; it serves "
                    f"{', '.join(served) or 'no model'}. Pass that name with --model, or start the "
                    f"server with the name (vLLM: --served-model-name {self.model})."
                )
            served_as = served_as or (served[0] if served else None)
        if down and len(self._pool.replicas) == 1:
            raise self._all_failed(connection=connection)  # one server: said without replica talk
        if down:
            listing = "\n".join(down)
            raise BackendUnreachable(
                f"{len(down)} of {len(self._pool.replicas)} replicas did not answer:\n{listing}\n"
                "Start the server(s) or fix --base-url."
            )
        # One base URL is a server, not a set of replicas (doctor prints this key as its label).
        label = "server" if len(self._pool.replicas) == 1 else "replicas"
        return ModelInfo(name=self.model, details={label: self.where}, served_as=served_as)

    async def _answers_any_name(self, replica: Replica) -> bool:
        """Whether the replica completes a one-token request for our model name all the same."""
        told = self._facts.get(replica.base_url)
        probe = {
            "model": self.model,
            "prompt": PROBE_PROMPT,
            "max_tokens": 1,
            "temperature": 0,
            **neutral_samplers(told.engine if told is not None else None),
        }
        try:
            response = await self._client.post(f"{replica.base_url}/completions", json=probe)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def aclose(self) -> None:
        """Close the HTTP connections to every replica."""
        await self._client.aclose()

    async def _request(self, replica: Replica, path: str) -> dict[str, Any]:
        """GET one replica's `path`; returns the decoded JSON of a 200 answer."""
        url = f"{replica.base_url}{path}"
        with self._pool.in_flight(replica):
            try:
                response = await self._client.get(url)
            except httpx.HTTPError as exc:
                raise self._transport_failure(exc, url) from exc
        self._check_status(replica, path, response)
        try:
            payload = response.json()
        except ValueError as exc:
            raise BackendResponseError(
                f"{url} answered with something that is not JSON ({response.text[:200]!r}); "
                "check that --base-url points at an OpenAI-compatible server ending in /v1."
            ) from exc
        if not isinstance(payload, dict):
            raise BackendResponseError(
                f"{url} answered with JSON that is not an object ({payload!r:.200}); "
                "check that --base-url points at an OpenAI-compatible /v1 endpoint."
            )
        return payload

    async def _stream_completion(self, replica: Replica, body: dict[str, Any], started: float) -> Completion:
        """POST a streamed /completions to one replica and gather the pieces into one Completion."""
        url = f"{replica.base_url}/completions"
        answered = False  # the server began a stream: a later failure happened in the engine
        with self._pool.in_flight(replica):
            try:
                async with self._client.stream("POST", url, json=body) as response:
                    answered = response.status_code == 200
                    if response.status_code != 200:
                        await response.aread()
                        self._check_status(replica, "/completions", response)
                    streamed = await read_completion_stream(response.aiter_bytes(), url)
            except (httpx.HTTPError, _ReplicaFailed, BackendResponseError) as exc:
                refusal = await self._refusal_behind(replica, body) if answered else None
                if refusal is not None:
                    raise refusal from exc
                if answered and isinstance(exc, httpx.TransportError):  # not unreachable: it broke off
                    raise _ReplicaFailed(
                        f"the completion stream broke off ({describe_error(exc)})", connection=False
                    ) from exc
                if isinstance(exc, httpx.HTTPError):
                    raise self._transport_failure(exc, url) from exc
                raise
        details = {"replica": replica.base_url, "usage": streamed.usage_source}
        if streamed.cache_source:
            details["cache"] = streamed.cache_source
        return Completion(
            text=streamed.text,
            prompt_tokens=streamed.prompt_tokens,
            completion_tokens=streamed.completion_tokens,
            finish_reason=streamed.finish_reason,
            seconds=time.perf_counter() - started,
            cached_tokens=streamed.cached_tokens,
            details=details,
        )

    async def _refusal_behind(self, replica: Replica, body: dict[str, Any]) -> BackendError | None:
        """The engine's own error for a request whose stream failed, asked for without streaming.

        Some engines (llama_cpp.server) check a request only once its stream has started, so a
        prompt too long for their context breaks the stream instead of answering 400; the same
        request unstreamed, with one token to generate, gets the engine's message.
        """
        probe = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
        probe["max_tokens"] = 1
        # A connection of its own: the broken stream's pooled connection may be half closed.
        try:
            async with httpx.AsyncClient(timeout=self._client.timeout, headers=self._client.headers) as fresh:
                response = await fresh.post(f"{replica.base_url}/completions", json=probe)
        except httpx.HTTPError:
            return None  # the server is gone: the stream's own failure says enough
        if not 400 <= response.status_code < 500:
            return None
        try:
            self._check_status(replica, "/completions", response)
        except BackendError as refusal:
            return refusal
        return None

    def _transport_failure(self, exc: httpx.HTTPError, url: str) -> Exception:
        """The error for an HTTP exchange that broke: another replica may serve it, or a timeout."""
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            return _ReplicaFailed(describe_error(exc), connection=True)
        if isinstance(exc, httpx.TimeoutException):
            return timed_out(url, self.timeout, self.model, "; the server may be overloaded")
        # The connection broke mid-request (a crash?) or the answer was not valid HTTP.
        return _ReplicaFailed(describe_error(exc), connection=True)

    def _check_status(self, replica: Replica, path: str, response: httpx.Response) -> None:
        """Raise the error an answer other than 200 means; note a healthy replica otherwise."""
        if response.status_code >= 500:
            raise _ReplicaFailed(f"HTTP {response.status_code}: {error_message(response)}", connection=False)
        if response.status_code in (401, 403):
            raise BackendAuthError(self._auth_message(replica, response))
        if response.status_code == 404:
            raise self._not_found(replica, path, response)
        if response.status_code != 200:
            message = error_message(response)
            if "context" in message.lower():
                raise BackendResponseError(
                    f"{replica.base_url}{path} cannot hold the episode's prompt (HTTP "
                    f"{response.status_code}): {message}. An episode needs up to 12,288 tokens: "
                    "start the server with a context of 16,384 (llama.cpp: -c 16384 or --n_ctx "
                    "16384; vLLM: --max-model-len 16384; SGLang: --context-length 16384)."
                )
            raise BackendResponseError(
                f"{replica.base_url}{path} refused the request (HTTP {response.status_code}): "
                f"{message}. Check the server's log and its limits (context length, max_tokens)."
            )
        self._pool.mark_answered(replica)

    def _auth_message(self, replica: Replica, response: httpx.Response) -> str:
        answer = f"HTTP {response.status_code}: {error_message(response)}"
        if not self._has_key:
            return (
                f"{replica.base_url} requires an API key ({answer}). Put the key in an "
                "environment variable and pass that variable's name with --api-key-env."
            )
        source = f"${self.api_key_env}" if self.api_key_env else "the variable named by --api-key-env"
        return (
            f"{replica.base_url} refused the API key from {source} ({answer}). "
            f"Check the key stored in {source}."
        )

    def _not_found(self, replica: Replica, path: str, response: httpx.Response) -> BackendError:
        message = error_message(response)
        if "model" in message.lower():
            return ModelNotFound(
                f"{replica.base_url} does not serve the model '{self.model}' ({message}). Pass "
                "the name the server serves with --model (vLLM: its --served-model-name; "
                f"GET {replica.base_url}/models lists them)."
            )
        return BackendResponseError(
            f"{replica.base_url}{path} does not exist (HTTP 404: {message}). The base URL "
            "must be the server's OpenAI root, usually ending in /v1 (http://HOST:8000/v1)."
        )

    def _all_failed(self, *, connection: bool) -> BackendError:
        listing = self._pool.failure_listing()
        if len(self._pool.replicas) == 1:  # one server: no replica talk
            only = self._pool.replicas[0]
            if connection:
                return BackendUnreachable(
                    f"Could not reach the model server at {only.base_url} ({only.last_error}). Start it "
                    "or fix --base-url."
                )
            return BackendResponseError(
                f"The model server at {only.base_url} failed for model '{self.model}' ({only.last_error}). "
                "Check its log."
            )
        if connection:
            return BackendUnreachable(
                f"No replica could serve model '{self.model}':\n{listing}\n"
                "Start the server(s) or fix --base-url; failed replicas are retried after "
                f"{self.failure_cooldown:g} s."
            )
        return BackendResponseError(
            f"Every replica tried failed for model '{self.model}':\n{listing}\n"
            "Check the servers' logs; failed replicas are retried after "
            f"{self.failure_cooldown:g} s."
        )
