"""OllamaBackend against the fake Ollama over real HTTP (the real `ollama` client)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import httpx
import ollama
import pytest

from agent.backends.base import VLLM_NEUTRAL_SAMPLERS, Completion, ModelInfo, SamplingSettings
from agent.backends.ollama import OllamaBackend
from agent.backends.ollama_facts import resolve_ollama_host
from agent.errors import (
    BackendResponseError,
    BackendTimeout,
    BackendUnreachable,
    ConfigError,
    ModelNotFound,
)
from tests.support.fake_ollama import SHOW_PARAMETERS
from tests.support.policies import DEFAULT_MODEL, ScriptedReply, ScriptPolicy

pytestmark = pytest.mark.anyio

PROMPT = "<|im_start|>user\nHow many rows?<|im_end|>\n<|im_start|>assistant\n"


class SlowPolicy:
    """Answers after `delay` seconds whatever the prompt."""

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def reply(self, prompt: str, model: str) -> ScriptedReply:
        """A short text, late."""
        return ScriptedReply("late", delay=self.delay)


def _no_time(completion: Completion) -> Completion:
    return dataclasses.replace(completion, seconds=0.0)


# ---- host resolution ---------------------------------------------------------------------


def test_host_explicit_wins_over_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """An explicit host beats OLLAMA_HOST and is normalised to scheme://host:port."""
    monkeypatch.setenv("OLLAMA_HOST", "10.0.0.1:1234")
    assert resolve_ollama_host("gpu-box") == "http://gpu-box:11434"


def test_host_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without an explicit host, OLLAMA_HOST is used (Ollama's own spelling: 0.0.0.0)."""
    monkeypatch.setenv("OLLAMA_HOST", "0.0.0.0")
    assert resolve_ollama_host(None) == "http://0.0.0.0:11434"


def test_host_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither given (or blank): the local default."""
    monkeypatch.setenv("OLLAMA_HOST", "  ")
    assert resolve_ollama_host(None) == "http://127.0.0.1:11434"
    monkeypatch.delenv("OLLAMA_HOST")
    assert resolve_ollama_host("") == "http://127.0.0.1:11434"


def test_host_spellings() -> None:
    """Ports and schemes are filled in the way the ollama client does."""
    assert [
        resolve_ollama_host(h)
        for h in (
            "http://h",
            "https://h",
            "h:99",
            ":5000",
            "https://h:8443/ollama/",
            "[::1]:7000",
        )
    ] == [
        "http://h:80",
        "https://h:443",
        "http://h:99",
        "http://127.0.0.1:5000",
        "https://h:8443/ollama",
        "http://[::1]:7000",
    ]


def test_host_bad_scheme() -> None:
    """A non-HTTP scheme is a configuration error that says what to give instead."""
    with pytest.raises(ConfigError) as caught:
        resolve_ollama_host("ftp://h")
    assert str(caught.value) == (
        "Ollama host 'ftp://h' has the scheme 'ftp'; give http://HOST:PORT or "
        "https://HOST:PORT (for example http://127.0.0.1:11434)."
    )


# ---- requests and results ----------------------------------------------------------------


async def test_generate_request_fields(fake_ollama) -> None:
    """complete() sends raw=True, stream=False, the sampling options, stops, num_ctx, num_predict."""
    fake = fake_ollama(ScriptPolicy(["SELECT 1"]))
    backend = OllamaBackend(
        DEFAULT_MODEL,
        host=fake.url,
        sampling=SamplingSettings(seed=7),
        num_ctx=8192,
        keep_alive="10m",
    )
    await backend.complete(PROMPT, max_tokens=300)
    await backend.aclose()
    assert fake.bodies("/api/generate") == [
        {
            "model": DEFAULT_MODEL,
            "prompt": PROMPT,
            "stream": False,
            "raw": True,
            "keep_alive": "10m",
            "options": {
                "temperature": 0.6,
                "top_p": 0.95,
                "top_k": 20,
                "repeat_penalty": 1.0,
                "presence_penalty": 0.0,
                "frequency_penalty": 0.0,
                "min_p": 0.0,
                "typical_p": 1.0,
                "num_ctx": 8192,
                "num_predict": 300,
                "stop": ["<|im_end|>", "<|endoftext|>", "<|im_start|>"],
                "seed": 7,
            },
        }
    ]


def test_modelfile_sets_the_same_neutral_samplers() -> None:
    """The Modelfile's PARAMETER lines give every sampler vLLM leaves off its neutral value."""
    modelfile = Path(__file__).resolve().parents[2] / "Modelfile"
    parameters = dict(
        line.split()[1:3]
        for line in modelfile.read_text(encoding="utf-8").splitlines()
        if line.startswith("PARAMETER ") and '"' not in line
    )
    assert {k: float(parameters[k]) for k in VLLM_NEUTRAL_SAMPLERS} == dict(VLLM_NEUTRAL_SAMPLERS)
    assert parameters["repeat_penalty"] == "1.0"


async def test_generate_request_without_seed_or_keep_alive(fake_ollama) -> None:
    """No seed and no keep_alive: neither key is sent (Ollama's defaults apply)."""
    fake = fake_ollama(ScriptPolicy(["SELECT 1"]))
    backend = OllamaBackend(DEFAULT_MODEL, host=fake.url)
    await backend.complete(PROMPT, max_tokens=64)
    await backend.aclose()
    body = fake.bodies("/api/generate")[0]
    assert ("keep_alive" in body, body["options"]) == (
        False,
        {
            "temperature": 0.6,
            "top_p": 0.95,
            "top_k": 20,
            "repeat_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "min_p": 0.0,
            "typical_p": 1.0,
            "num_ctx": 16384,
            "num_predict": 64,
            "stop": ["<|im_end|>", "<|endoftext|>", "<|im_start|>"],
        },
    )


async def test_completion_cut_at_stop(fake_ollama) -> None:
    """Text ends at the first stop string; token counts come from Ollama's eval counts."""
    fake = fake_ollama(ScriptPolicy(['<think>go</think>{"tool": "list_tables"}<|im_end|>more']))
    backend = OllamaBackend(DEFAULT_MODEL, host=fake.url)
    completion = await backend.complete(PROMPT, max_tokens=100)
    await backend.aclose()
    assert _no_time(completion) == Completion(
        text='<think>go</think>{"tool": "list_tables"}',
        prompt_tokens=16,
        completion_tokens=10,
        finish_reason="stop",
    )


async def test_completion_cut_at_num_predict(fake_ollama) -> None:
    """A reply longer than num_predict is cut there and reported as finish_reason 'length'."""
    fake = fake_ollama(ScriptPolicy(["abcdefghijklmnopqrstuvwxyz"]))
    backend = OllamaBackend(DEFAULT_MODEL, host=fake.url)
    completion = await backend.complete(PROMPT, max_tokens=3)
    await backend.aclose()
    assert _no_time(completion) == Completion(
        text="abcdefghijkl",
        prompt_tokens=16,
        completion_tokens=3,
        finish_reason="length",
    )


async def test_model_tag_latest_is_the_same_model(fake_ollama) -> None:
    """`name:latest` reaches the model installed as `name`, as in Ollama."""
    fake = fake_ollama(ScriptPolicy(["ok"]))
    backend = OllamaBackend(f"{DEFAULT_MODEL}:latest", host=fake.url)
    completion = await backend.complete(PROMPT, max_tokens=10)
    await backend.aclose()
    assert completion.text == "ok"


async def test_describe_model(fake_ollama) -> None:
    """describe_model() returns Ollama's parameters, template, details and capabilities."""
    fake = fake_ollama(ScriptPolicy(["unused"]))
    backend = OllamaBackend(DEFAULT_MODEL, host=fake.url)
    info = await backend.describe_model()
    await backend.aclose()
    assert info == ModelInfo(
        name=DEFAULT_MODEL,
        parameters=SHOW_PARAMETERS,
        template="{{ .Prompt }}",
        details={
            "parent_model": "",
            "format": "gguf",
            "family": "qwen35",
            "families": "qwen35",
            "parameter_size": "2B",
            "quantization_level": "Q8_0",
        },
        capabilities=("completion",),
    )


# ---- errors ------------------------------------------------------------------------------


async def test_unreachable(dead_url: str) -> None:
    """Nothing listening: BackendUnreachable naming the host and how to start Ollama."""
    backend = OllamaBackend(DEFAULT_MODEL, host=dead_url)
    with pytest.raises(BackendUnreachable) as caught:
        await backend.complete(PROMPT, max_tokens=10)
    await backend.aclose()
    assert str(caught.value) == (
        f"Could not reach Ollama at {dead_url} (connection refused or host unknown). Start it "
        "with `ollama serve`, or give its address with --ollama-host or the OLLAMA_HOST "
        "environment variable."
    )
    assert isinstance(caught.value.__cause__, ConnectionError)


async def test_describe_unreachable(dead_url: str) -> None:
    """describe_model() maps a refused connection the same way."""
    backend = OllamaBackend(DEFAULT_MODEL, host=dead_url)
    with pytest.raises(BackendUnreachable):
        await backend.describe_model()
    await backend.aclose()


async def test_model_not_found(fake_ollama) -> None:
    """An unknown model: ModelNotFound with the exact `ollama create` command."""
    fake = fake_ollama(ScriptPolicy(["unused"]), models=("other-model",))
    backend = OllamaBackend("missing-model", host=fake.url)
    with pytest.raises(ModelNotFound) as caught:
        await backend.complete(PROMPT, max_tokens=10)
    with pytest.raises(ModelNotFound) as caught_show:
        await backend.describe_model()
    await backend.aclose()
    expected = (
        f"Ollama at {fake.url} has no model named 'missing-model' (model \"missing-model\" not "
        "found, try pulling it first). Create it with `ollama create missing-model -f "
        'Modelfile` (see README.md, "Getting the model into Ollama"), or pass an installed '
        "model's name with --model (`ollama list` shows them)."
    )
    assert (str(caught.value), str(caught_show.value)) == (expected, expected)
    assert isinstance(caught.value.__cause__, ollama.ResponseError)


@pytest.mark.parametrize(
    ("runtime", "reply", "message"),
    [
        pytest.param(
            "fake_ollama",
            ScriptedReply("llama runner process has terminated", http_status=500),
            f"Ollama at {{url}} refused the request for model '{DEFAULT_MODEL}' (HTTP 500): llama runner "
            "process has terminated. Check the `ollama serve` log; if the model fails to load, recreate it "
            "with `ollama create`.",
            id="any other error answer carries Ollama's message",
        ),
        pytest.param(
            "fake_openai",
            "unused",
            "{url} answered 404 (Not Found): it does not look like an Ollama server. If it is an "
            "OpenAI-compatible engine (llama.cpp's llama-server, vLLM, SGLang, python -m llama_cpp.server), "
            "use --backend openai --base-url {url} instead of --ollama-host; otherwise check --ollama-host / "
            "OLLAMA_HOST (the default is http://127.0.0.1:11434).",
            id="a 404 without a model in it means the address is wrong",
        ),
    ],
)
async def test_error_answers(
    request: pytest.FixtureRequest, runtime: str, reply: ScriptedReply | str, message: str
) -> None:
    """An error answer is a BackendResponseError naming the address and what to check."""
    fake = request.getfixturevalue(runtime)(ScriptPolicy([reply]))
    backend = OllamaBackend(DEFAULT_MODEL, host=fake.url)  # fake_openai's url ends in /v1: no /api
    with pytest.raises(BackendResponseError) as caught:
        await backend.complete(PROMPT, max_tokens=10)
    await backend.aclose()
    assert str(caught.value) == message.format(url=fake.url)


async def test_timeout(fake_ollama) -> None:
    """A reply slower than the timeout: BackendTimeout naming it; the request is abandoned."""
    fake = fake_ollama(SlowPolicy(30.0))
    backend = OllamaBackend(DEFAULT_MODEL, host=fake.url, timeout=0.3)
    with pytest.raises(BackendTimeout) as caught:
        await backend.complete(PROMPT, max_tokens=10)
    await backend.aclose()
    assert str(caught.value) == (
        f"Ollama at {fake.url} did not answer within 0.3 s (model '{DEFAULT_MODEL}'). The model "
        "may still be loading or the machine is busy: retry, or give the backend a longer "
        "timeout."
    )
    assert isinstance(caught.value.__cause__, httpx.ReadTimeout)
    assert await fake.await_disconnects(1, timeout=5.0)


async def test_cancellation_closes_the_request(fake_ollama) -> None:
    """Cancelling the awaiting task closes the HTTP request: the fake sees the disconnect."""
    fake = fake_ollama(SlowPolicy(30.0))
    backend = OllamaBackend(DEFAULT_MODEL, host=fake.url)
    await fake.cancel_when_generating(lambda: backend.complete(PROMPT, max_tokens=10))
    assert len(fake.requests) == 1
    assert await fake.await_disconnects(1, timeout=20.0)  # within the 30 s: not waited out
    # The backend still works after a cancelled request.
    fake.policy = ScriptPolicy(["again"])
    assert (await backend.complete(PROMPT, max_tokens=10)).text == "again"
    await backend.aclose()


async def test_fake_streams_ndjson_like_ollama(fake_ollama) -> None:
    """The fake also streams (stream=true): pieces concatenate to the whole reply."""
    fake = fake_ollama(ScriptPolicy(["streamed reply<|im_end|>"]))
    client = ollama.AsyncClient(host=fake.url)
    parts = [
        part async for part in await client.generate(model=DEFAULT_MODEL, prompt=PROMPT, raw=True, stream=True)
    ]
    await client.close()
    assert ("".join(p.response or "" for p in parts), parts[-1].done, parts[-1].eval_count) == (
        "streamed reply",
        True,
        4,
    )


def test_keep_alive_numbers_are_seconds_and_durations_stay_text() -> None:
    """'-1' and '300' become numbers (seconds, -1 for ever); '30m' stays a duration string."""
    from agent.backends.ollama_facts import ollama_keep_alive

    assert [ollama_keep_alive(v) for v in ("-1", "300", "1.5", "30m", None, 60)] == [
        -1,
        300,
        1.5,
        "30m",
        None,
        60,
    ]
