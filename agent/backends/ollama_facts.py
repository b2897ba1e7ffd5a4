"""What we know of Ollama and what it tells about itself: where it listens, the keep_alive values
it takes, the releases that matter for qwen3.5, our Modelfile's parameters, and the traps
/api/version and /api/show reveal (pure; the backend asks). The settings read this module, never
the backend's, which imports the ollama client."""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from ..errors import ConfigError
from .base import VLLM_NEUTRAL_SAMPLERS, SamplingSettings

# Ollama serves this many requests of one model at once (its default here: 1).
OLLAMA_PARALLEL_ENV = "OLLAMA_NUM_PARALLEL"
OLLAMA = "Ollama"
# Ollama loads qwen3.5 models (the Gated DeltaNet hybrid) and imports their safetensors since
# 0.17.1 (ollama #14378); runs GGUF models on llama.cpp's llama-server, which loads the GGUFs
# llama.cpp's converter writes, since 0.30.0 (ollama #16031: before, its own engine loaded Qwen3.5
# GGUFs only as its own import lays them out, ollama #14545, #14513); and reports the prompt tokens
# it served from its cache (prompt_eval_cached_count) since 0.33.3. docs/engines.md cites them.
QWEN35_SINCE = (0, 17, 1)
LLAMA_SERVER_SINCE = (0, 30, 0)
CACHED_COUNT_SINCE = (0, 33, 3)
# The Modelfile's PARAMETER lines: sampling as trained and vLLM's neutral samplers (sent with
# every request too), and the context an episode needs.
DEFAULT_NUM_CTX = 16384
MODELFILE_PARAMETERS: Mapping[str, float] = MappingProxyType(
    {
        "temperature": SamplingSettings.temperature,
        "top_p": SamplingSettings.top_p,
        "top_k": SamplingSettings.top_k,
        **VLLM_NEUTRAL_SAMPLERS,
        "num_ctx": DEFAULT_NUM_CTX,
    }
)
CACHE_ADVICE = (
    "use Ollama 0.33.3 or later (it reports the reuse; releases built on llama.cpp "
    "before its checkpoint fix #28302 re-process Qwen3.5 prompts under 8,192 tokens), "
    f"give sqale-mcp --runtime-slots equal to {OLLAMA_PARALLEL_ENV}, and keep the model "
    "loaded (OLLAMA_KEEP_ALIVE=30m) with OLLAMA_CONTEXT_LENGTH=16384 so that other "
    "clients of the model do not make Ollama reload it"
)
CACHE_UNREPORTED = (
    f"Ollama before {'.'.join(map(str, CACHED_COUNT_SINCE))} does not report the "
    "prompt tokens it served from its cache: prompt reuse shows as unknown"
)


def _dotted(release: tuple[int, ...]) -> str:
    return ".".join(map(str, release))


OWN_ENGINE_NOTE = (
    f"Ollama before {_dotted(LLAMA_SERVER_SINCE)} loads a Qwen3.5 GGUF only as its own "
    "import writes it (`ollama create` from the safetensors folder), not one converted "
    f"with llama.cpp; {_dotted(LLAMA_SERVER_SINCE)} and later load both (llama.cpp's "
    "llama-server)"
)


def release_facts(version: str | None) -> tuple[list[str], list[str]]:
    """(warnings, notes) for the Ollama release `version` (/api/version); none when it is unknown."""
    seen = version_tuple(version) if version is not None else None
    if seen is None:
        return [], []
    warnings, notes = [], []
    if seen < QWEN35_SINCE:
        warnings.append(
            f"Ollama {version} is older than {_dotted(QWEN35_SINCE)}, the first release that "
            "runs qwen3.5 models: upgrade Ollama"
        )
    elif seen < LLAMA_SERVER_SINCE:
        notes.append(OWN_ENGINE_NOTE)
    if seen < CACHED_COUNT_SINCE:
        notes.append(CACHE_UNREPORTED)
    return warnings, notes


def version_tuple(version: str) -> tuple[int, ...] | None:
    """ "0.17.1" or "v0.30.0-rc2" as (0, 17, 1); None for anything else (a development build)."""
    match = re.match(r"^v?(\d+)\.(\d+)\.(\d+)", version.strip())
    if match is None:
        return None
    parsed = tuple(int(part) for part in match.groups())
    return None if parsed == (0, 0, 0) else parsed


def context_length(model_info: Mapping[str, Any]) -> int | None:
    """The model's trained context from /api/show's model_info (`<architecture>.context_length`)."""
    for key, value in model_info.items():
        if key.endswith(".context_length") and isinstance(value, int) and not isinstance(value, bool):
            return value if value > 0 else None
    return None


def parse_parameters(text: str) -> dict[str, str]:
    """Ollama's PARAMETER lines as /api/show prints them (`name   value`); repeated names (stop) joined."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        name, _, value = line.strip().partition(" ")
        if name:
            found.setdefault(name, []).append(value.strip())
    return {name: " ".join(values) for name, values in found.items()}


def parameter_warnings(text: str) -> list[str]:
    """One warning per model parameter that differs from our Modelfile's (num_ctx is ours per request)."""
    shown = parse_parameters(text)
    warnings = []
    for name, ours in MODELFILE_PARAMETERS.items():
        if name not in shown or name == "num_ctx":
            continue
        try:
            value = float(shown[name].strip('"'))
        except ValueError:
            value = None
        if value is None or abs(value - ours) > 1e-6:
            warnings.append(
                f"the model's PARAMETER {name} is {shown[name]}, our Modelfile's is {ours:g}: sqale "
                "sends its own value with every request, but other clients of this model (ollama "
                "run, Open WebUI) sample differently than the model was trained; re-create it with "
                "`ollama create ... -f Modelfile`"
            )
    return warnings


# Where Ollama listens, and the keep_alive values it takes: what the settings check before any
# backend is built (agent/backends/registry.py), so they live here, not beside the client.
DEFAULT_OLLAMA_HOST = "http://127.0.0.1:11434"
_OLLAMA_PORT = 11434
# Ollama's keep_alive: seconds as a number, or a Go duration such as 30m, 1h30m, -1m.
_SECONDS = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)$")
GO_DURATION = re.compile(r"^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))+$")
KEEP_ALIVE_HINT = "not a duration; give seconds (300, -1 for ever) or a number with a unit: 30m, 1h, 90s"


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
            f"Ollama host {host!r} is not a valid address; give HOST:PORT or a URL like http://127.0.0.1:11434."
        )
    if ":" in hostname:  # IPv6 literal: urlsplit drops the brackets
        hostname = f"[{hostname}]"
    path = split.path.rstrip("/")
    return f"{scheme.lower()}://{hostname}:{port}{path}"
