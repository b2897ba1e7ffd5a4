"""What an OpenAI-compatible engine tells about itself, and what we know about each engine.

Best effort and read-only: llama.cpp's llama-server answers GET /props with its `total_slots`, its
per-slot context (`default_generation_settings.n_ctx`) and its build; llama-cpp-python's server
(`python -m llama_cpp.server`) names itself in its OpenAPI title and serves one request at a time;
vLLM answers GET /version and lists its context (`max_model_len`) in /v1/models. Each engine
spells the neutral samplers its own way, and needs its own flags to reuse our prompts.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .base import VLLM_NEUTRAL_SAMPLERS, EngineFacts

if TYPE_CHECKING:  # the caller's client brings httpx in; the settings read this module's texts without it
    import httpx

LLAMA_SERVER = "llama.cpp's llama-server"
ENGINES_THAT_SAY = "llama-server's /props, 1 for llama-cpp-python's server"  # for help texts
LLAMA_CPP_PYTHON = "llama-cpp-python's server (llama_cpp.server)"
VLLM = "vLLM"
_LLAMA_CPP_PYTHON_TITLE = "llama.cpp Python API"  # FastAPI's title in llama_cpp.server.app
# llama_cpp.server takes requests one at a time; by default a request that arrives while another
# streams makes it end that stream early (ServerSettings.interrupt_requests).
LLAMA_CPP_PYTHON_NOTE = (
    "a request that arrives while another one streams cuts that one off unless "
    "the server was started with --interrupt_requests False: keep one runtime "
    "slot and one sqale-agent or sqale-mcp in front of it"
)
LLAMA_CPP_PYTHON_CACHE_NOTE = (
    "it does not report which prompt tokens it served from its cache "
    "(its verbose log does: 'prefix-match hit'), so prompt reuse shows as "
    "unknown"
)
SILENT_NOTE = (
    "the engine does not say how many sequences it runs at once; for a server that "
    "serves one request at a time give --runtime-slots 1"
)

# The neutral samplers (base.VLLM_NEUTRAL_SAMPLERS, Ollama's names) as each engine names them.
# llama.cpp's servers default to min_p 0.05 (llama-server also to top_k 40); vLLM may take
# defaults from the model's generation_config.json: every request says the trained values.
_VLLM_NAMES = MappingProxyType(
    {
        "repetition_penalty": VLLM_NEUTRAL_SAMPLERS["repeat_penalty"],
        "presence_penalty": VLLM_NEUTRAL_SAMPLERS["presence_penalty"],
        "frequency_penalty": VLLM_NEUTRAL_SAMPLERS["frequency_penalty"],
        "min_p": VLLM_NEUTRAL_SAMPLERS["min_p"],
    }
)  # vLLM has no typical_p; it logs the fields it ignores, so none are sent to it
NEUTRAL_SAMPLERS_BY_ENGINE: Mapping[str | None, Mapping[str, float]] = MappingProxyType(
    {
        LLAMA_SERVER: VLLM_NEUTRAL_SAMPLERS,
        LLAMA_CPP_PYTHON: VLLM_NEUTRAL_SAMPLERS,
        VLLM: _VLLM_NAMES,
        # An engine that does not say what it is gets both spellings: each engine reads its own
        # and ignores the other's.
        None: MappingProxyType({**VLLM_NEUTRAL_SAMPLERS, **_VLLM_NAMES}),
    }
)

# What to do when later rounds re-evaluate their whole prompt, per engine (docs/engines.md).
CACHE_ADVICE: Mapping[str | None, str] = MappingProxyType(
    {
        LLAMA_SERVER: (
            "keep one episode per slot (--runtime-slots equal to -np); for Qwen3.5 (a hybrid "
            "model) start llama-server with --ctx-checkpoints 32 --checkpoint-min-step 0 and "
            "--cache-ram 8192 or more, or use a build with the checkpoint fix of llama.cpp "
            "#28302 (checkpoints of prompts under 8,192 tokens were evicted); --cache-reuse "
            "does not help this model"
        ),
        LLAMA_CPP_PYTHON: (
            "keep --runtime-slots 1 and one sqale process in front of it: it keeps one prompt in its cache"
        ),
        VLLM: (
            "start vLLM with --enable-prefix-caching --mamba-cache-mode align (Qwen3.5 is a hybrid "
            "model); its cache blocks are hundreds of tokens long, so only whole blocks of our "
            "prompt are reused: short prompts get no hit at all"
        ),
        None: (
            "keep one episode per engine slot (--runtime-slots equal to what the engine serves at "
            "once) and check the engine's prompt-cache settings"
        ),
    }
)


def engine_root(base_url: str) -> str:
    """The server's root for routes outside the OpenAI API (/props, /openapi.json, /version)."""
    return base_url.removesuffix("/v1")


def neutral_samplers(engine: str | None) -> Mapping[str, float]:
    """The neutral samplers under the names `engine` reads (both spellings for an unknown one)."""
    return NEUTRAL_SAMPLERS_BY_ENGINE.get(engine, NEUTRAL_SAMPLERS_BY_ENGINE[None])


async def engine_facts(
    client: httpx.AsyncClient, base_url: str, timeout: float, model: str | None = None
) -> EngineFacts:
    """What the engine at `base_url` says about itself; facts with only `where` when it says nothing."""
    # Routes that answer at once even while the engine generates (llama_cpp.server's /v1/models
    # waits for the generation to end, and it is recognised before /v1/models is asked).
    root = engine_root(base_url)
    props = await _get_json(client, f"{root}/props", timeout)
    slots = props.get("total_slots") if props is not None else None
    if props is not None and _count(slots) is not None:
        return _llama_server_facts(base_url, props)
    openapi = await _get_json(client, f"{root}/openapi.json", timeout)
    info = openapi.get("info") if openapi is not None else None
    title = info.get("title") if isinstance(info, dict) else None
    if isinstance(title, str) and _LLAMA_CPP_PYTHON_TITLE in title:
        version = info.get("version") if isinstance(info, dict) else None
        return EngineFacts(
            where=base_url,
            engine=LLAMA_CPP_PYTHON,
            slots=1,
            slots_source="llama-cpp-python's server serves one request at a time",
            version=version if isinstance(version, str) else None,
            notes=(LLAMA_CPP_PYTHON_NOTE, LLAMA_CPP_PYTHON_CACHE_NOTE),
        )
    answered = await _get_json(client, f"{root}/version", timeout)
    version = answered.get("version") if answered is not None else None
    if isinstance(version, str):
        context = _vllm_context(await _get_json(client, f"{base_url}/models", timeout), model)
        return EngineFacts(
            where=base_url,
            engine=VLLM,
            version=version,
            context_tokens=context,
            context_source="/v1/models max_model_len" if context is not None else "",
            notes=(SILENT_NOTE,),
        )
    return EngineFacts(where=base_url, notes=(SILENT_NOTE,))


def _llama_server_facts(base_url: str, props: dict[str, Any]) -> EngineFacts:
    """llama-server's /props: its slots, its per-slot context and its build."""
    settings = props.get("default_generation_settings")
    context = _count(settings.get("n_ctx")) if isinstance(settings, dict) else None
    build = props.get("build_info")
    return EngineFacts(
        where=base_url,
        engine=LLAMA_SERVER,
        slots=_count(props.get("total_slots")),
        slots_source="/props total_slots",
        version=build if isinstance(build, str) and build else None,
        context_tokens=context or None,
        context_source="/props default_generation_settings.n_ctx (per slot)" if context else "",
    )


def _vllm_context(models: dict[str, Any] | None, model: str | None) -> int | None:
    """vLLM's max_model_len for `model` (else for the one model it lists)."""
    data = models.get("data") if models is not None else None
    cards = [card for card in data if isinstance(card, dict)] if isinstance(data, list) else []
    chosen = [card for card in cards if card.get("id") == model] or cards[:1]
    return _count(chosen[0].get("max_model_len")) if chosen else None


def _count(value: object) -> int | None:
    """A positive count as the engine sent it; None for anything else (a bool, 0, text)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value


async def _get_json(client: httpx.AsyncClient, url: str, timeout: float) -> dict[str, Any] | None:
    """The JSON object a GET of `url` answers with 200, or None (any failure: the engine does not say)."""
    import httpx

    try:
        response = await client.get(url, timeout=timeout)
        payload = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return payload if isinstance(payload, dict) else None
