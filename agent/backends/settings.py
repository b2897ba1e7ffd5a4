"""Which runtime serves the model, with what name, where, and how long a request may take.

The one source of the backend settings: the CLI commands and the MCP server both add their
flags with `add_backend_flags`, validate them as a `BackendSettings` and build the backend
with `make_backend`.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from ..errors import ConfigError
from .base import ModelBackend, SamplingSettings

DEFAULT_MODEL = "qwen3.5-2b-grpo-synsql"
DEFAULT_OLLAMA_HOST = "http://127.0.0.1:11434"
BACKENDS = ("ollama", "openai")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_http_url(url: str) -> bool:
    """True when `url` starts with http:// or https://, as every base URL must."""
    return url.startswith(("http://", "https://"))


class BackendSettings(BaseModel):
    """The model backend, validated once: kind, model, addresses, API key, request limit."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    backend: Literal["ollama", "openai"] = "ollama"
    model: str = Field(DEFAULT_MODEL, min_length=1)
    ollama_host: str | None = None  # resolved when the backend starts: this, $OLLAMA_HOST, localhost
    keep_alive: str | None = None  # how long Ollama keeps the model loaded ("30m", "-1": for ever)
    base_urls: tuple[str, ...] = ()
    api_key_env: str | None = None
    api_key: SecretStr | None = None  # read from the variable named by api_key_env
    request_timeout: float = Field(300.0, gt=0, le=86_400)

    @model_validator(mode="after")
    def _consistent_backend(self) -> BackendSettings:
        if self.backend == "openai" and not self.base_urls:
            raise ValueError("--backend openai needs at least one --base-url (e.g. http://host:8000/v1)")
        if self.backend == "ollama" and self.base_urls:
            raise ValueError("--base-url is for --backend openai; give Ollama's address with --ollama-host")
        if self.backend == "openai" and self.ollama_host:
            raise ValueError("--ollama-host is for --backend ollama; "
                             "for an OpenAI-compatible server use --base-url")
        if self.backend != "ollama" and self.keep_alive is not None:
            raise ValueError("--keep-alive is for --backend ollama; an OpenAI-compatible server keeps "
                             "its model loaded")
        for url in self.base_urls:
            if not is_http_url(url):
                raise ValueError(f"--base-url {url!r} must start with http:// or https:// "
                                 "(e.g. http://127.0.0.1:8000/v1)")
        return self

    @property
    def api_key_value(self) -> str | None:
        """The API key itself, for the backend's Authorization header."""
        return self.api_key.get_secret_value() if self.api_key is not None else None

    @property
    def address(self) -> str:
        """Where the model runs, for messages: the Ollama host or the replicas' base URLs."""
        if self.backend == "ollama":
            return self.ollama_host or f"Ollama at $OLLAMA_HOST or {DEFAULT_OLLAMA_HOST}"
        return ", ".join(self.base_urls)


def _default(field: str) -> Any:
    return BackendSettings.model_fields[field].default


def add_backend_flags(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Add --backend, --model, --ollama-host, --base-url, --api-key-env, --keep-alive and
    --request-timeout; every default is None so that the fields' defaults (or a config file) apply."""
    parser.add_argument("--backend", choices=BACKENDS,
                        help="the model runtime: ollama (a local Ollama) or openai (an OpenAI-compatible "
                             f"/v1/completions server: vLLM, SGLang, llama.cpp); default {_default('backend')}")
    parser.add_argument("--model", help=f"model name in the runtime (default {_default('model')})")
    parser.add_argument("--ollama-host", metavar="URL",
                        help=f"Ollama address (default $OLLAMA_HOST, else {DEFAULT_OLLAMA_HOST})")
    parser.add_argument("--base-url", action="append", metavar="URL",
                        help="OpenAI-compatible base URL such as http://HOST:8000/v1; repeat for replicas")
    parser.add_argument("--api-key-env", metavar="NAME",
                        help="environment variable holding the API key of the openai backend")
    parser.add_argument("--keep-alive", metavar="DURATION",
                        help="how long Ollama keeps the model loaded after a request, e.g. 30m, 1h, "
                             "or -1 for ever (default: Ollama's own, 5m)")
    parser.add_argument("--request-timeout", type=float, metavar="SECONDS",
                        help=f"seconds one model request may take (default {_default('request_timeout'):g})")


def read_secret(env_name: object, environ: Mapping[str, str], flag: str,
                when: str = "before starting the server") -> SecretStr:
    """The non-empty value of the environment variable `env_name`; ConfigError saying how to set it."""
    if not isinstance(env_name, str) or not _ENV_NAME.match(env_name):
        raise ConfigError(f"{flag} {env_name!r}: give the NAME of an environment variable, not its value")
    value = environ.get(env_name, "").strip()
    if not value:
        raise ConfigError(f"{flag} {env_name}: the environment variable {env_name} is not set or empty; "
                          f"export {env_name}=<secret> {when}")
    return SecretStr(value)


def with_api_key(values: dict[str, Any], environ: Mapping[str, str],
                 when: str = "before starting the server") -> dict[str, Any]:
    """`values` with `api_key` read from the variable that `api_key_env` names, if it names one."""
    if values.get("api_key_env") is not None:
        values["api_key"] = read_secret(values["api_key_env"], environ, "--api-key-env", when)
    return values


def validation_message(exc: ValidationError) -> str:
    """The first validation problem as one line naming the setting as its flag."""
    err = exc.errors()[0]
    loc = ".".join(str(part) for part in err["loc"])
    message = str(err["msg"]).removeprefix("Value error, ")
    if loc:
        return f"--{loc.replace('_', '-')}: {message} (got {err.get('input')!r})"
    return message


def backend_settings(flags: Mapping[str, Any], environ: Mapping[str, str]) -> BackendSettings:
    """BackendSettings from parsed flags and the environment; ConfigError when they do not fit."""
    values = {k: v for k, v in flags.items() if k in BackendSettings.model_fields and v is not None}
    if flags.get("base_url") is not None:
        values["base_urls"] = tuple(flags["base_url"])
    values = with_api_key(values, environ, when="and run the command again")
    try:
        return BackendSettings(**values)
    except ValidationError as exc:
        raise ConfigError(validation_message(exc)) from exc


def make_backend(settings: BackendSettings, sampling: SamplingSettings = SamplingSettings()  # noqa: B008
                 ) -> ModelBackend:
    """The backend `settings` describe, sampling with `sampling` (one per seed when sampling several)."""
    if settings.backend == "openai":
        from .openai_compat import OpenAICompletionsBackend

        return OpenAICompletionsBackend(settings.model, settings.base_urls, api_key=settings.api_key_value,
                                        sampling=sampling, timeout=settings.request_timeout,
                                        api_key_env=settings.api_key_env)
    from .ollama import OllamaBackend

    return OllamaBackend(settings.model, host=settings.ollama_host, sampling=sampling,
                         timeout=settings.request_timeout, keep_alive=settings.keep_alive)
