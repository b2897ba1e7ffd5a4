"""Which runtime serves the model, with what name, where, and how long a request may take.

The one source of the backend settings: the CLI commands and the MCP server both add their
flags with `add_backend_flags`, validate them as a `BackendSettings` and build the backend
with `make_backend`. `BACKENDS` is the one list of backends: each name, its help and its builder.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from ..errors import ConfigError
from ..options import ArgumentAdder, Option, add_flags, option_of, setting_name
from ..settings import Layered, problem_text, with_secrets
from ._http import is_http_url
from ._replicas import replicas_address
from .base import ModelBackend, SamplingSettings
from .ollama_facts import DEFAULT_OLLAMA_HOST, KEEP_ALIVE_HINT, is_keep_alive, resolve_ollama_host

DEFAULT_MODEL = "qwen3.5-2b-grpo-synsql"


@dataclass(frozen=True)
class BackendKind:
    """One value of --backend: what it is, which flags fit it, where its model runs, how to build it.

    Every field is required: a new backend states each of these itself.
    """

    help: str  # completes "the model runtime: NAME for ..." in --backend's help
    # What this backend lacks among the flags given (a flag of another backend's is refused by
    # BackendSettings itself, from the field's Option(backend=...)).
    problem: Callable[[BackendSettings], str | None]
    where: Callable[[BackendSettings], str]  # where the model runs, from the settings alone
    build: Callable[[BackendSettings, SamplingSettings], ModelBackend]


def _ollama_problem(settings: BackendSettings) -> str | None:
    return None  # every setting of Ollama's has a default


# A builder imports its backend's module: only a command that talks to the model pays for the
# HTTP client (ollama, httpx); the settings read the light modules above.
def _ollama(settings: BackendSettings, sampling: SamplingSettings) -> ModelBackend:
    from .ollama import OllamaBackend

    return OllamaBackend(
        settings.model,
        host=settings.ollama_host,
        sampling=sampling,
        timeout=settings.request_timeout,
        keep_alive=settings.keep_alive,
    )


def _openai_problem(settings: BackendSettings) -> str | None:
    if not settings.base_urls:
        return "--backend openai needs at least one --base-url (e.g. http://host:8000/v1)"
    return None


def _openai(settings: BackendSettings, sampling: SamplingSettings) -> ModelBackend:
    from .openai_compat import OpenAICompletionsBackend

    return OpenAICompletionsBackend(
        settings.model,
        settings.base_urls,
        api_key=settings.api_key_value,
        sampling=sampling,
        timeout=settings.request_timeout,
        api_key_env=settings.api_key_env,
    )


# The backends --backend can name: its choices, in this order. A new backend is a module with its
# class and one entry here (see docs/contributing.md).
BACKENDS: Mapping[str, BackendKind] = MappingProxyType(
    {
        "ollama": BackendKind(
            help="a local Ollama",
            problem=_ollama_problem,
            # the host in use: the flag, else $OLLAMA_HOST, else localhost
            where=lambda settings: resolve_ollama_host(settings.ollama_host),
            build=_ollama,
        ),
        "openai": BackendKind(
            help="an OpenAI-compatible /v1/completions server such as vLLM, SGLang or llama.cpp",
            problem=_openai_problem,
            where=lambda settings: replicas_address(settings.base_urls),
            build=_openai,
        ),
    }
)


class BackendSettings(BaseModel):
    """The model backend, validated once: kind, model, addresses, API key, request limit."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Annotated[str, Option(env="SQALE_BACKEND")] = Field(
        "ollama",
        json_schema_extra={"enum": list(BACKENDS)},  # --backend's choices
        description="the model runtime: "
        + ", ".join(f"{name} for {kind.help}" for name, kind in BACKENDS.items()),
    )
    model: Annotated[str, Option(metavar="NAME", env="SQALE_MODEL")] = Field(
        DEFAULT_MODEL, min_length=1, description="model name in the runtime"
    )
    # Resolved when the backend starts: this, else $OLLAMA_HOST, else localhost.
    ollama_host: Annotated[
        str | None,
        Option(
            metavar="URL",
            env="SQALE_OLLAMA_HOST",
            backend="ollama",
            default_text=f"$OLLAMA_HOST, else {DEFAULT_OLLAMA_HOST}",
        ),
    ] = Field(None, description="Ollama address")
    keep_alive: Annotated[
        str | None, Option(metavar="DURATION", backend="ollama", default_text="Ollama's own, 5m")
    ] = Field(
        None, description="how long Ollama keeps the model loaded after a request, e.g. 30m, 1h, or -1 for ever"
    )
    base_urls: Annotated[
        tuple[str, ...],
        Option(name="base-url", metavar="URL", repeatable=True, env="SQALE_BASE_URL", backend="openai"),
    ] = Field(
        (),
        description="OpenAI-compatible base URL such as http://HOST:8000/v1; repeat for replicas "
        "(in the config file a string or a list; in SQALE_BASE_URL separated by spaces)",
    )
    api_key_env: Annotated[str | None, Option(metavar="NAME", backend="openai")] = Field(
        None, description="environment variable holding the API key of the openai backend"
    )
    api_key: SecretStr | None = None  # read from the variable named by api_key_env
    request_timeout: float = Field(300.0, gt=0, le=86_400, description="seconds one model request may take")

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, value: str) -> str:
        if value not in BACKENDS:
            raise ValueError(f"Input should be {' or '.join(repr(name) for name in BACKENDS)}")
        return value

    @field_validator("keep_alive")
    @classmethod
    def _ollama_duration(cls, value: str | None) -> str | None:
        if value is not None and not is_keep_alive(value):
            raise ValueError(KEEP_ALIVE_HINT)
        return value

    @model_validator(mode="after")
    def _consistent_backend(self) -> BackendSettings:
        for name, field in type(self).model_fields.items():  # a flag belongs to the backend its field names
            owner = option_of(field).backend
            if owner not in (None, self.backend) and getattr(self, name) != field.get_default():
                flag = f"--{setting_name(type(self), name)}"
                raise ValueError(
                    f"{flag} is for --backend {owner}, not {self.backend}: add --backend "
                    f"{owner}, or leave {flag} out"
                )
        problem = BACKENDS[self.backend].problem(self)
        if problem is not None:
            raise ValueError(problem)
        for url in self.base_urls:
            if not is_http_url(url):
                raise ValueError(
                    f"--base-url {url!r} must start with http:// or https:// (e.g. http://127.0.0.1:8000/v1)"
                )
        return self

    @property
    def api_key_value(self) -> str | None:
        """The API key itself, for the backend's Authorization header."""
        return self.api_key.get_secret_value() if self.api_key is not None else None

    @property
    def address(self) -> str:
        """Where the model runs, for messages: the Ollama host or the replicas' base URLs."""
        return BACKENDS[self.backend].where(self)


BACKEND_FLAGS = ("backend", "model", "ollama_host", "base_urls", "api_key_env", "keep_alive", "request_timeout")


def add_backend_flags(parser: ArgumentAdder) -> None:
    """Add --backend, --model, --ollama-host, --base-url, --api-key-env, --keep-alive and
    --request-timeout; every default is None so that the fields' defaults (or a config file) apply."""
    add_flags(parser, BackendSettings, *BACKEND_FLAGS)


def backend_settings(
    values: Mapping[str, Any], environ: Mapping[str, str], layers: Layered | None = None
) -> BackendSettings:
    """BackendSettings from values by field name (parsed flags, or `layers.values`; None: not
    given) and the environment; ConfigError naming the setting as `layers` says it was set."""
    given = {k: v for k, v in values.items() if k in BackendSettings.model_fields and v is not None}
    given = with_secrets(BackendSettings, given, environ, when="and run the command again")
    try:
        settings = BackendSettings(**given)
    except ValidationError as exc:
        raise ConfigError(problem_text(exc, BackendSettings, layers)) from exc
    settings.address  # noqa: B018 - a malformed address (Ollama's host) is refused before anything starts
    return settings


def make_backend(
    settings: BackendSettings,
    sampling: SamplingSettings = SamplingSettings(),  # noqa: B008
) -> ModelBackend:
    """The backend `settings` describe, sampling with `sampling` (one per seed when sampling several)."""
    return BACKENDS[settings.backend].build(settings, sampling)
