"""One source of backend settings: the rules, the flags, the API key, the backend they build."""

from __future__ import annotations

import argparse

import pytest
from pydantic import ValidationError

from agent.backends.base import ModelBackend
from agent.backends.ollama import OllamaBackend
from agent.backends.openai_compat import OpenAICompletionsBackend
from agent.backends.registry import (
    BACKENDS,
    DEFAULT_MODEL,
    BackendSettings,
    add_backend_flags,
    backend_settings,
    make_backend,
)
from agent.commands.argparse_shim import option_groups
from agent.errors import ConfigError
from agent.options import option_of, setting_name


def parse(argv: list[str], environ: dict[str, str] | None = None) -> BackendSettings:
    parser = argparse.ArgumentParser()
    add_backend_flags(parser)
    return backend_settings(vars(parser.parse_args(argv)), environ or {})


def problem(argv: list[str], environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        parse(argv, environ)
    return str(info.value)


def test_defaults_come_from_the_fields() -> None:
    """No flags: Ollama, the default model, a 300 s request limit; the help shows those defaults."""
    assert parse([]) == BackendSettings()
    assert (BackendSettings().backend, BackendSettings().model, BackendSettings().request_timeout) == (
        "ollama",
        DEFAULT_MODEL,
        300.0,
    )
    parser = argparse.ArgumentParser(formatter_class=lambda prog: argparse.HelpFormatter(prog, width=500))
    add_backend_flags(parser)
    text = parser.format_help()
    assert f"(default {DEFAULT_MODEL})" in text and "(default 300)" in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--backend", "openai"], "--backend openai needs at least one --base-url (e.g. http://host:8000/v1)"),
        (
            ["--base-url", "http://h/v1"],
            "--base-url is for --backend openai, not ollama: add --backend openai, or leave --base-url out",
        ),
        (
            ["--backend", "openai", "--base-url", "http://h/v1", "--ollama-host", "http://o:1"],
            "--ollama-host is for --backend ollama, not openai: add --backend ollama, or leave "
            "--ollama-host out",
        ),
        (
            ["--backend", "openai", "--base-url", "http://h/v1", "--keep-alive", "5m"],
            "--keep-alive is for --backend ollama, not openai: add --backend ollama, or leave --keep-alive out",
        ),
        (
            ["--backend", "openai", "--base-url", "h:8000/v1"],
            "--base-url 'h:8000/v1' must start with http:// or https:// (e.g. http://127.0.0.1:8000/v1)",
        ),
        (["--request-timeout", "0"], "--request-timeout: Input should be greater than 0 (got 0.0)"),
        (
            ["--backend", "openai", "--base-url", "http://h/v1", "--api-key-env", "KEY"],
            "--api-key-env KEY: the environment variable KEY is not set or empty; export KEY=<secret> and run "
            "the command again",
        ),
    ],
)
def test_mistakes_are_one_line_naming_the_flag(argv: list[str], message: str) -> None:
    """Each inconsistent combination is one ConfigError line naming the flag and the fix."""
    assert problem(argv) == message


def test_every_flag_a_backend_owns_is_refused_for_the_other() -> None:
    """Exclusivity follows each field's Option(backend=...): every owned flag, none listed by hand,
    is refused for the other backend with the same one line."""
    owned = {
        name: option_of(field).backend
        for name, field in BackendSettings.model_fields.items()
        if option_of(field).backend
    }
    assert owned == {
        "ollama_host": "ollama",
        "keep_alive": "ollama",
        "base_urls": "openai",
        "api_key_env": "openai",
    }
    values = {
        "ollama_host": "http://o:1",
        "keep_alive": "5m",
        "base_urls": ("http://h/v1",),
        "api_key_env": "KEY",
    }
    for name, owner in owned.items():
        other = next(b for b in BACKENDS if b != owner)
        given = {
            "backend": other,
            name: values[name],
            **({"base_urls": values["base_urls"]} if other == "openai" else {}),
        }
        with pytest.raises(ConfigError) as info:
            backend_settings(given, {"KEY": "k"})
        flag = f"--{setting_name(BackendSettings, name)}"
        assert str(info.value) == (
            f"{flag} is for --backend {owner}, not {other}: add --backend {owner}, or leave {flag} out"
        )


def test_openai_settings_build_the_backend_with_key_and_limit() -> None:
    """The key is read from the named variable; make_backend passes URLs, key and request limit."""
    settings = parse(
        [
            "--backend",
            "openai",
            "--base-url",
            "http://a/v1",
            "--base-url",
            "http://b/v1",
            "--api-key-env",
            "KEY",
            "--request-timeout",
            "12",
        ],
        {"KEY": " k "},
    )
    assert (settings.api_key_value, settings.address) == ("k", "http://a/v1, http://b/v1")
    backend = make_backend(settings)
    assert isinstance(backend, OpenAICompletionsBackend)
    assert (backend.base_urls, backend.timeout, backend.api_key_env) == (
        ("http://a/v1", "http://b/v1"),
        12.0,
        "KEY",
    )


def test_ollama_settings_build_the_backend() -> None:
    """make_backend gives Ollama its host, keep-alive and request limit."""
    backend = make_backend(
        parse(["--ollama-host", "http://o:1", "--keep-alive", "30m", "--request-timeout", "9", "--model", "m"])
    )
    assert isinstance(backend, OllamaBackend)
    assert (backend.model, backend.host, backend.keep_alive, backend.timeout) == ("m", "http://o:1", "30m", 9.0)


def test_backend_names_come_from_one_registry() -> None:
    """--backend's choices and the settings' check both read BACKENDS; an unknown name lists them."""
    parser = argparse.ArgumentParser()
    add_backend_flags(parser)
    (action,) = [a for _, actions in option_groups(parser) for a in actions if a.dest == "backend"]
    assert tuple(action.choices or ()) == tuple(BACKENDS) == ("ollama", "openai")
    with pytest.raises(ValidationError, match="Input should be 'ollama' or 'openai'"):
        BackendSettings(backend="vllm")


# What every registered backend answers itself rather than with ModelBackend's neutral default.
OWN_ANSWERS = ("with_seed", "describe_model", "where", "replica_label", "default_slots", "engine_facts")


@pytest.mark.parametrize("name", list(BACKENDS))
def test_every_backend_states_its_own_defaults(name: str) -> None:
    """Each registered backend says where it runs, its default slots and its engines' facts itself,
    checks its model and seeds its samples.

    A new backend that skipped one would fall into the neutral defaults; this keeps it honest.
    """
    urls = ("http://h/v1",) if name == "openai" else ()
    backend = make_backend(BackendSettings(backend=name, base_urls=urls))
    assert isinstance(backend, ModelBackend)
    inherited = [
        n for n in OWN_ANSWERS if next(c for c in type(backend).__mro__ if n in vars(c)) is ModelBackend
    ]
    assert inherited == [], name
