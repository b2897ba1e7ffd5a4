"""Command-line options that choose the model backend, shared by the commands that run episodes."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from ..backends.base import ModelBackend, SamplingSettings
from ..backends.ollama import ollama_keep_alive, resolve_ollama_host
from ..errors import ConfigError
from ..prompt import PromptSet, load_prompts

DEFAULT_MODEL = "qwen3.5-2b-grpo-synsql"
BACKENDS = ("ollama", "openai")


@dataclass(frozen=True)
class BackendChoice:
    """Which runtime serves the model, parsed and checked once."""

    kind: str  # "ollama" or "openai"
    model: str
    ollama_host: str | None
    base_urls: tuple[str, ...]
    api_key_env: str | None
    api_key: str | None  # read from the environment variable named by api_key_env
    timeout: float
    keep_alive: str | None = None  # how long Ollama keeps the model loaded, e.g. "30m" or "-1"


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --backend, --model, --ollama-host, --base-url, --api-key-env, --request-timeout and the
    prompt options --reference-agent, --system-prompt, --user-template."""
    group = parser.add_argument_group("model backend")
    group.add_argument("--backend", choices=BACKENDS, default="ollama",
                       help="the model runtime: a local Ollama (default) or an OpenAI-compatible "
                            "/v1/completions server (vLLM, SGLang, llama.cpp)")
    group.add_argument("--model", default=DEFAULT_MODEL,
                       help=f"model name in the runtime (default {DEFAULT_MODEL})")
    group.add_argument("--ollama-host", metavar="URL",
                       help="Ollama address (default $OLLAMA_HOST, else http://127.0.0.1:11434)")
    group.add_argument("--base-url", action="append", default=[], metavar="URL",
                       help="OpenAI-compatible base URL such as http://HOST:8000/v1; repeat for replicas")
    group.add_argument("--api-key-env", metavar="NAME",
                       help="environment variable holding the API key of the openai backend")
    group.add_argument("--keep-alive", metavar="DURATION",
                       help="how long Ollama keeps the model loaded after a request, e.g. 30m, 1h, "
                            "or -1 for ever (default: Ollama's own, 5m)")
    group.add_argument("--request-timeout", type=float, default=300.0, metavar="SECONDS",
                       help="seconds one model request may take (default 300)")
    group.add_argument("--reference-agent", metavar="PATH",
                       help="the authors' sqale_agent.py: use its SYSTEM_PROMPT and USER_TEMPLATE "
                            "(read, never executed)")
    group.add_argument("--system-prompt", metavar="FILE",
                       help="replace the system prompt with this UTF-8 text file")
    group.add_argument("--user-template", metavar="FILE",
                       help="replace the user turn template ({question}, {evidence}) with this file")


def backend_choice(args: argparse.Namespace) -> BackendChoice:
    """Check the backend options together and read the API key from the environment."""
    base_urls = tuple(args.base_url or ())
    if args.backend == "ollama" and base_urls:
        raise ConfigError("--base-url is for --backend openai; for Ollama use --ollama-host URL")
    if args.backend == "openai" and not base_urls:
        raise ConfigError("--backend openai needs --base-url http://HOST:PORT/v1 (repeat it for replicas)")
    if args.backend == "openai" and args.ollama_host:
        raise ConfigError("--ollama-host is for --backend ollama; "
                          "for an OpenAI-compatible server use --base-url")
    if args.keep_alive is not None and args.backend != "ollama":
        raise ConfigError("--keep-alive is for --backend ollama; an OpenAI-compatible server keeps "
                          "its model loaded")
    if args.request_timeout <= 0:
        raise ConfigError("--request-timeout must be above 0 seconds")
    ollama_host = args.ollama_host
    if args.backend == "ollama":
        ollama_keep_alive(args.keep_alive)  # refuse a bad duration before anything starts
        ollama_host = resolve_ollama_host(args.ollama_host)  # the address used, shown in headers
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise ConfigError(f"--api-key-env {args.api_key_env}: that environment variable is not set; "
                              "export it with the key or drop --api-key-env")
    return BackendChoice(kind=args.backend, model=args.model, ollama_host=ollama_host,
                         base_urls=base_urls, api_key_env=args.api_key_env, api_key=api_key,
                         timeout=args.request_timeout, keep_alive=args.keep_alive)


def make_backend(choice: BackendChoice, sampling: SamplingSettings) -> ModelBackend:
    """A backend for `choice` sampling with `sampling` (one per seed when sampling several)."""
    if choice.kind == "openai":
        from ..backends.openai_compat import OpenAICompletionsBackend

        return OpenAICompletionsBackend(choice.model, choice.base_urls, api_key=choice.api_key,
                                        sampling=sampling, timeout=choice.timeout,
                                        api_key_env=choice.api_key_env)
    from ..backends.ollama import OllamaBackend

    return OllamaBackend(choice.model, host=choice.ollama_host, sampling=sampling, timeout=choice.timeout,
                         keep_alive=choice.keep_alive)


def prompts_from_args(args: argparse.Namespace) -> PromptSet:
    """The prompts the options ask for: ours, or the reference agent's, with file overrides."""
    return load_prompts(args.reference_agent, args.system_prompt, args.user_template)
