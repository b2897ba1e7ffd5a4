"""OpenAICompletionsBackend against fake OpenAI-compatible servers over real HTTP."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import anyio
import httpx
import pytest

from agent.backends.base import Completion, ModelInfo, SamplingSettings
from agent.backends.openai_compat import OpenAICompletionsBackend
from agent.errors import (
    BackendAuthError,
    BackendResponseError,
    BackendTimeout,
    BackendUnreachable,
    ConfigError,
    ModelNotFound,
)
from tests.support.policies import DEFAULT_MODEL, ScriptedReply, ScriptPolicy

pytestmark = pytest.mark.anyio

PROMPT = "<|im_start|>user\nHow many rows?<|im_end|>\n<|im_start|>assistant\n"


class KeyedPolicy:
    """Replies keyed on a word in the prompt: 'slow' waits, 'fail' answers HTTP 500."""

    def reply(self, prompt: str, model: str) -> ScriptedReply:
        """The reply the prompt's keyword asks for."""
        if "fail" in prompt:
            return ScriptedReply("CUDA out of memory", http_status=500)
        if "slow" in prompt:
            return ScriptedReply("slow answer", delay=30.0)
        if "brief" in prompt:
            return ScriptedReply("brief answer", delay=0.3)
        return ScriptedReply("quick answer<|im_end|>")


def _backend(urls: list[str], **options) -> OpenAICompletionsBackend:
    options.setdefault("api_key", None)
    return OpenAICompletionsBackend(DEFAULT_MODEL, urls, **options)


def _no_time(completion: Completion) -> Completion:
    return dataclasses.replace(completion, seconds=0.0)


# ---- requests and results ----------------------------------------------------------------


async def test_request_body_and_key(fake_openai) -> None:
    """POST {base}/completions with the raw prompt, sampling, top_k, the neutral samplers under both
    spellings (an engine that does not say what it is), stops, seed and the bearer key."""
    fake = fake_openai(KeyedPolicy(), api_key="sekrit")
    backend = _backend([fake.url], api_key="sekrit", sampling=SamplingSettings(seed=3))
    await backend.complete(PROMPT, max_tokens=512)
    await backend.aclose()
    request = fake.requests[0]
    assert (request.path, request.headers["authorization"], request.body) == (
        "/v1/completions",
        "Bearer sekrit",
        {
            "model": DEFAULT_MODEL,
            "prompt": PROMPT,
            "max_tokens": 512,
            "temperature": 0.6,
            "top_p": 0.95,
            "top_k": 20,
            "repeat_penalty": 1.0,
            "repetition_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "min_p": 0.0,
            "typical_p": 1.0,
            "stop": ["<|im_end|>", "<|endoftext|>", "<|im_start|>"],
            "seed": 3,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )


async def test_no_seed_no_key(fake_openai) -> None:
    """Without a seed the key is absent; without an API key no Authorization header is sent."""
    fake = fake_openai(KeyedPolicy())
    backend = _backend([fake.url + "/"])  # a trailing slash is tolerated
    await backend.complete(PROMPT, max_tokens=8)
    await backend.aclose()
    request = fake.requests[0]
    assert (request.path, "seed" in request.body, "authorization" in request.headers) == (
        "/v1/completions",
        False,
        False,
    )


async def test_completion_fields(fake_openai) -> None:
    """Text, usage token counts, finish_reason and the replica that answered."""
    fake = fake_openai(KeyedPolicy())
    backend = _backend([fake.url])
    completion = await backend.complete(PROMPT, max_tokens=100)
    await backend.aclose()
    assert _no_time(completion) == Completion(
        text="quick answer",
        prompt_tokens=16,
        completion_tokens=3,
        finish_reason="stop",
        details={"replica": fake.url, "usage": "server"},
    )


async def test_completions_one_after_another_share_one_connection(fake_openai) -> None:
    """Each stream is read to the end of its body, past `data: [DONE]`, so its connection goes back
    to the pool: ten completions, one connection (cut short, each would open a new one)."""
    fake = fake_openai(KeyedPolicy())
    backend = _backend([fake.url])
    for _ in range(10):
        await backend.complete(PROMPT, max_tokens=8)
    await backend.aclose()
    completions = [r for r in fake.requests if r.path == "/v1/completions"]
    assert (len(completions), len({r.peer for r in completions})) == (10, 1)


async def test_finish_reason_length(fake_openai) -> None:
    """A reply cut at max_tokens reports 'length'."""
    fake = fake_openai(ScriptPolicy(["abcdefghijklmnop"]))
    backend = _backend([fake.url])
    completion = await backend.complete(PROMPT, max_tokens=2)
    await backend.aclose()
    assert (completion.text, completion.completion_tokens, completion.finish_reason) == (
        "abcdefgh",
        2,
        "length",
    )


# ---- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "fake_options", "base", "backend_options", "error", "message"),
    [
        pytest.param(
            KeyedPolicy,
            {"api_key": "sekrit"},
            "url",
            {},
            BackendAuthError,
            "{url} requires an API key (HTTP 401: Unauthorized). Put the key in an environment variable "
            "and pass that variable's name with --api-key-env.",
            id="401 without a key",
        ),
        pytest.param(
            KeyedPolicy,
            {"api_key": "sekrit"},
            "url",
            {"api_key": "wrong", "api_key_env": "VLLM_KEY"},
            BackendAuthError,
            "{url} refused the API key from $VLLM_KEY (HTTP 401: Unauthorized). Check the key stored in "
            "$VLLM_KEY.",
            id="401 with a key names its variable",
        ),
        pytest.param(
            KeyedPolicy,
            {"models": ("other",)},
            "url",
            {},
            ModelNotFound,
            f"{{url}} does not serve the model '{DEFAULT_MODEL}' (The model `{DEFAULT_MODEL}` does not "
            "exist.). Pass the name the server serves with --model (vLLM: its --served-model-name; "
            "GET {url}/models lists them).",
            id="404 about the model",
        ),
        pytest.param(
            KeyedPolicy,
            {},
            "root",
            {},
            BackendResponseError,
            "{url}/completions does not exist (HTTP 404: Not Found). The base URL must be the server's "
            "OpenAI root, usually ending in /v1 (http://HOST:8000/v1).",
            id="404 from a base URL without /v1",
        ),
        pytest.param(
            lambda: ScriptPolicy([ScriptedReply("prompt is too long", http_status=400)]),
            {},
            "url",
            {},
            BackendResponseError,
            "{url}/completions refused the request (HTTP 400): prompt is too long. Check the server's log "
            "and its limits (context length, max_tokens).",
            id="another 4xx",
        ),
    ],
)
async def test_error_answers(
    fake_openai,
    policy: Any,
    fake_options: dict[str, Any],
    base: str,
    backend_options: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    """Each error answer is our error type, with a message naming the URL and what to change."""
    fake = fake_openai(policy(), **fake_options)
    url = getattr(fake, base)
    backend = _backend([url], **backend_options)
    with pytest.raises(error) as caught:
        await backend.complete(PROMPT, max_tokens=8)
    await backend.aclose()
    assert str(caught.value) == message.format(url=url)


async def test_server_error_single_replica(fake_openai, caplog) -> None:
    """500 from the only server: BackendResponseError naming it, without replica talk, and no warning
    (the caller reports the error: a second line would say it twice)."""
    fake = fake_openai(KeyedPolicy())
    backend = _backend([fake.url])
    with (
        caplog.at_level(logging.WARNING, logger="agent.backends"),
        pytest.raises(BackendResponseError) as caught,
    ):
        await backend.complete("fail", max_tokens=8)
    await backend.aclose()
    assert str(caught.value) == (
        f"The model server at {fake.url} failed for model '{DEFAULT_MODEL}' (HTTP 500: CUDA out of "
        "memory). Check its log."
    )
    assert [r.getMessage() for r in caplog.records] == []


async def test_single_server_down_is_named_without_replicas(dead_url: str) -> None:
    """The only base URL refuses connections: one sentence naming it, nothing about replicas or cooldowns."""
    backend = _backend([f"{dead_url}/v1"])
    with pytest.raises(BackendUnreachable) as caught:
        await backend.complete(PROMPT, max_tokens=8)
    await backend.aclose()
    assert str(caught.value) == (
        f"Could not reach the model server at {dead_url}/v1 (ConnectError: All connection attempts "
        "failed). Start it or fix --base-url."
    )


async def test_all_replicas_down(dead_url: str) -> None:
    """Every replica refuses connections: BackendUnreachable listing each URL and its error."""
    other_dead = dead_url.replace("127.0.0.1", "localhost")
    backend = _backend([f"{dead_url}/v1", f"{other_dead}/v1"])
    with pytest.raises(BackendUnreachable) as caught:
        await backend.complete(PROMPT, max_tokens=8)
    await backend.aclose()
    assert str(caught.value) == (
        f"No replica could serve model '{DEFAULT_MODEL}':\n"
        f"  {dead_url}/v1: ConnectError: All connection attempts failed\n"
        f"  {other_dead}/v1: ConnectError: All connection attempts failed\n"
        "Start the server(s) or fix --base-url; failed replicas are retried after 30 s."
    )


async def test_timeout(fake_openai) -> None:
    """Slower than the timeout: BackendTimeout (not retried elsewhere); the request is dropped."""
    fake = fake_openai(KeyedPolicy())
    spare = fake_openai(KeyedPolicy())
    backend = _backend([fake.url, spare.url], timeout=0.3)
    with pytest.raises(BackendTimeout) as caught:
        await backend.complete("slow", max_tokens=8)
    await backend.aclose()
    assert str(caught.value) == (
        f"{fake.url}/completions did not answer within 0.3 s (model '{DEFAULT_MODEL}'); the "
        "server may be overloaded: retry, or give the backend a longer timeout."
    )
    assert isinstance(caught.value.__cause__, httpx.ReadTimeout)
    assert (await fake.await_disconnects(1, timeout=5.0), len(spare.requests)) == (True, 0)


async def test_cancellation_closes_the_request(fake_openai) -> None:
    """Cancelling the awaiting task closes the request; the backend keeps working."""
    fake = fake_openai(KeyedPolicy())
    backend = _backend([fake.url])
    await fake.cancel_when_generating(lambda: backend.complete("slow", max_tokens=8))
    assert await fake.await_disconnects(1, timeout=20.0)  # within the 30 s: not waited out
    assert (await backend.complete(PROMPT, max_tokens=8)).text == "quick answer"
    await backend.aclose()


async def test_a_prompt_too_long_for_the_engine_is_a_clear_error(fake_openai) -> None:
    """An engine that breaks the stream on a too-long prompt is asked again unstreamed for its error."""
    fake = fake_openai(KeyedPolicy(), context_tokens=10)
    backend = _backend([fake.url])
    with pytest.raises(BackendResponseError) as info:
        await backend.complete(PROMPT * 4, max_tokens=50)
    await backend.aclose()
    assert str(info.value).startswith(
        f"{fake.url}/completions cannot hold the episode's prompt (HTTP 400): "
        "This model's maximum context length is 10 tokens"
    )
    assert str(info.value).endswith(
        "start the server with a context of 16,384 (llama.cpp: -c 16384 or "
        "--n_ctx 16384; vLLM: --max-model-len 16384; SGLang: "
        "--context-length 16384)."
    )
    assert [(r.body.get("stream"), r.body["max_tokens"]) for r in fake.requests] == [(True, 50), (None, 1)]


def test_config_errors() -> None:
    """No base URL, or one without http(s)://, is a configuration error saying what to pass."""
    with pytest.raises(ConfigError) as none_given:
        _backend([])
    with pytest.raises(ConfigError) as bad_scheme:
        _backend(["localhost:8000/v1"])
    assert (str(none_given.value), str(bad_scheme.value)) == (
        "The openai backend needs at least one base URL: pass --base-url http://HOST:PORT/v1 "
        "(repeat it for several replicas).",
        "Base URL 'localhost:8000/v1' must start with http:// or https:// "
        "(for example http://127.0.0.1:8000/v1).",
    )


# ---- replicas ----------------------------------------------------------------------------


async def test_concurrent_requests_alternate_replicas(fake_openai) -> None:
    """Four concurrent requests over two idle replicas go A, B, A, B (fewest outstanding)."""
    a, b = fake_openai(KeyedPolicy()), fake_openai(KeyedPolicy())
    backend = _backend([a.url, b.url])
    replicas: dict[int, str] = {}

    async def ask(i: int) -> None:
        replicas[i] = (await backend.complete(f"brief {i}", max_tokens=8)).details["replica"]

    async with anyio.create_task_group() as group:
        for i in range(4):
            group.start_soon(ask, i)
    await backend.aclose()
    assert (replicas, len(a.requests), len(b.requests)) == (
        {0: a.url, 1: b.url, 2: a.url, 3: b.url},
        2,
        2,
    )


async def test_busy_replica_is_avoided(fake_openai) -> None:
    """While A holds a slow request, new requests go to B; once A is idle, the prompt B holds in its
    cache stays on B, and ties go to A."""
    a, b = fake_openai(KeyedPolicy()), fake_openai(KeyedPolicy())
    backend = _backend([a.url, b.url])
    answered: list[str] = []

    async def slow() -> None:
        await backend.complete("slow", max_tokens=8)  # holds A for 30 s

    async with anyio.create_task_group() as group:
        group.start_soon(slow)
        while not a.requests:
            await anyio.sleep(0.01)
        for _ in range(3):
            answered.append((await backend.complete(PROMPT, max_tokens=8)).details["replica"])
        group.cancel_scope.cancel()
    assert await a.await_disconnects(1, timeout=2.0)
    answered.append((await backend.complete(PROMPT, max_tokens=8)).details["replica"])
    answered.append((await backend.complete("another prompt", max_tokens=8)).details["replica"])
    await backend.aclose()
    assert answered == [b.url, b.url, b.url, b.url, a.url]


async def test_an_episodes_next_round_goes_back_to_the_replica_that_cached_its_prefix(fake_openai) -> None:
    """A continuation of a prompt goes to the replica that evaluated it, even when another replica
    is as busy (the least-busy rule alone would send it to the first listed, which must evaluate
    the whole prompt again)."""
    a, b = fake_openai(KeyedPolicy()), fake_openai(KeyedPolicy())
    backend = _backend([a.url, b.url])

    async def slow(prompt: str) -> None:
        await backend.complete(prompt, max_tokens=8)

    async with anyio.create_task_group() as group:
        group.start_soon(slow, "slow q")  # holds A
        while not a.requests:
            await anyio.sleep(0.01)
        first = await backend.complete(PROMPT, max_tokens=8)  # A is busy: B
        group.start_soon(slow, "slow r")  # B is the less busy: it holds B too
        while len(b.requests) < 2:
            await anyio.sleep(0.01)
        later = await backend.complete(PROMPT + "quick answer<|im_end|>\n<|im_start|>user\nmore", max_tokens=8)
        group.cancel_scope.cancel()
    await backend.aclose()
    assert (first.details["replica"], later.details["replica"]) == (b.url, b.url)


async def test_dead_replica_skipped_and_logged(fake_openai, dead_url: str, caplog) -> None:
    """A refusing replica is logged, the request is retried on the other, then A is skipped."""
    b = fake_openai(KeyedPolicy())
    dead = f"{dead_url}/v1"
    backend = _backend([dead, b.url])
    with caplog.at_level(logging.WARNING, logger="agent.backends"):
        first = await backend.complete(PROMPT, max_tokens=8)
        second = await backend.complete(PROMPT, max_tokens=8)
    await backend.aclose()
    assert (first.details, second.details, len(b.requests)) == (
        {"replica": b.url, "usage": "server"},
        {"replica": b.url, "usage": "server"},
        2,
    )
    assert [r.getMessage() for r in caplog.records] == [
        f"replica {dead} failed (ConnectError: All connection attempts failed); skipping it for 30 s",
    ]


async def test_failing_replica_retried_elsewhere(fake_openai) -> None:
    """A replica answering 500 is skipped for the cooldown; the other one serves."""

    class BrokenPolicy:
        def reply(self, prompt: str, model: str) -> ScriptedReply:
            return ScriptedReply("engine dead", http_status=503)

    a, b = fake_openai(BrokenPolicy()), fake_openai(KeyedPolicy())
    backend = _backend([a.url, b.url])
    first = await backend.complete(PROMPT, max_tokens=8)
    second = await backend.complete(PROMPT, max_tokens=8)
    await backend.aclose()
    assert (first.text, second.text, len(a.requests), len(b.requests)) == (
        "quick answer",
        "quick answer",
        1,
        2,
    )


async def test_cooling_replica_is_probed_when_all_are_down(fake_openai) -> None:
    """When every replica is cooling down, the next request still probes one."""
    fake = fake_openai(KeyedPolicy())
    backend = _backend([fake.url], failure_cooldown=600.0)
    with pytest.raises(BackendResponseError):
        await backend.complete("fail", max_tokens=8)
    completion = await backend.complete(PROMPT, max_tokens=8)
    await backend.aclose()
    assert (completion.text, len(fake.requests)) == ("quick answer", 2)


async def test_describe_model_asks_every_replica(fake_openai) -> None:
    """describe_model() passes when each replica's /models lists the model; a wrong key is an auth error."""
    first, second = fake_openai(KeyedPolicy()), fake_openai(KeyedPolicy())
    backend = _backend([first.url, second.url])
    try:
        info = await backend.describe_model()
    finally:
        await backend.aclose()
    assert info == ModelInfo(name=DEFAULT_MODEL, details={"replicas": f"{first.url}, {second.url}"})
    assert [len(s.bodies("/v1/models")) for s in (first, second)] == [1, 1]
    locked = fake_openai(KeyedPolicy(), api_key="right")
    backend = _backend([locked.url], api_key="wrong", api_key_env="VLLM_KEY")
    try:
        with pytest.raises(BackendAuthError, match=r"refused the API key from \$VLLM_KEY"):
            await backend.describe_model()
    finally:
        await backend.aclose()


async def test_single_server_down_at_the_model_check(dead_url: str) -> None:
    """describe_model on the only base URL, refused: one sentence naming it, not "1 of 1 replicas"."""
    backend = _backend([f"{dead_url}/v1"])
    with pytest.raises(BackendUnreachable) as caught:
        await backend.describe_model()
    await backend.aclose()
    assert str(caught.value) == (
        f"Could not reach the model server at {dead_url}/v1 (ConnectError: All connection attempts "
        "failed). Start it or fix --base-url."
    )
