"""`sqale-agent`: settings from the server's config file and SQALE_* variables, and its exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.backends.registry import BackendSettings
from agent.commands.backend_options import backend_choice
from agent.commands.cli import build_parser, main
from agent.errors import ConfigError
from agent.sqlite import create_database
from mcp_server.config.command_line import parse_settings
from tests.support.policies import OraclePolicy, ScriptPolicy


def choice(*argv: str) -> BackendSettings:
    """The backend `sqale-agent ask` would use with these options (the environment as monkeypatched)."""
    return backend_choice(build_parser().parse_args(["ask", "--db", "x.db", *argv, "q?"]))


@pytest.fixture
def user_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's default config file ($XDG_CONFIG_HOME/sqale-mcp/config.toml), set up for an engine."""
    folder = tmp_path / "xdg"
    (folder / "sqale-mcp").mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(folder))
    config = folder / "sqale-mcp" / "config.toml"
    config.write_text(
        'backend = "openai"\nbase-url = "http://127.0.0.1:8080/v1"\nmodel = "from-file"\n'
        'max-rows = 7\nruntime-slots = 1\n[db]\nshop = "shop.db"\n[tokens.a]\nenv = "A"\n'
    )
    return config


def test_commands_read_the_servers_config_file(user_config: Path) -> None:
    """No flags: the backend, base URL and model of the default config file; server keys are left alone."""
    assert choice() == BackendSettings(
        backend="openai", base_urls=("http://127.0.0.1:8080/v1",), model="from-file"
    )


def test_precedence_is_flag_then_variable_then_file(user_config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A flag beats its SQALE_* variable, which beats the config file, which beats the default."""
    monkeypatch.setenv("SQALE_MODEL", "from-env")
    assert choice().model == "from-env"
    assert choice("--model", "from-flag").model == "from-flag"
    monkeypatch.setenv("SQALE_BASE_URL", "http://127.0.0.1:1/v1 http://127.0.0.1:2/v1")
    assert choice().base_urls == ("http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1")
    assert choice("--base-url", "http://127.0.0.1:3/v1").base_urls == ("http://127.0.0.1:3/v1",)


def test_choosing_the_other_backend_above_drops_the_files_addresses(
    user_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--backend ollama` (or SQALE_BACKEND=ollama) over a file made for openai: its base-url is not used."""
    assert choice("--backend", "ollama") == BackendSettings(backend="ollama", model="from-file")
    monkeypatch.setenv("SQALE_BACKEND", "ollama")
    monkeypatch.setenv("SQALE_OLLAMA_HOST", "127.0.0.1:9")
    assert choice() == BackendSettings(backend="ollama", model="from-file", ollama_host="127.0.0.1:9")


def test_another_config_file_and_a_file_the_command_cannot_use(tmp_path: Path) -> None:
    """--config names another file; a file-level mistake is still one line naming the file."""
    other = tmp_path / "other.toml"
    other.write_text('backend = "openai"\nbase_url = ["http://127.0.0.1:1/v1"]\n')
    assert choice("--config", str(other)).base_urls == ("http://127.0.0.1:1/v1",)
    other.write_text('backend = "openai\n')
    with pytest.raises(ConfigError, match=r"^--config .*other.toml: not valid TOML \("):
        choice("--config", str(other))


def test_a_flag_of_the_other_backend_in_the_file_is_refused_naming_the_file(user_config: Path) -> None:
    """The file's own keep-alive beside its `backend = "openai"`: one line, saying the file set it."""
    user_config.write_text('backend = "openai"\nbase-url = "http://127.0.0.1:8080/v1"\nkeep-alive = "5m"\n')
    with pytest.raises(ConfigError) as info:
        choice()
    assert str(info.value) == (
        "--keep-alive is for --backend ollama, not openai: add --backend ollama, or "
        f"leave --keep-alive out (set by {user_config})"
    )


def test_a_bad_variable_is_named_as_the_user_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wrong value from SQALE_BACKEND names the variable; a rule it breaks says which variable set it."""
    monkeypatch.setenv("SQALE_BACKEND", "opnai")
    with pytest.raises(ConfigError) as info:
        choice()
    assert str(info.value) == "SQALE_BACKEND: Input should be 'ollama' or 'openai' (got 'opnai')"
    monkeypatch.setenv("SQALE_BACKEND", "openai")
    with pytest.raises(ConfigError) as info:
        choice()
    assert str(info.value) == (
        "--backend openai needs at least one --base-url (e.g. http://host:8000/v1) (set by SQALE_BACKEND)"
    )


def test_base_url_without_backend_suggests_backend_openai() -> None:
    """`ask --base-url URL` alone: add --backend openai (not: use --ollama-host)."""
    with pytest.raises(ConfigError) as info:
        choice("--base-url", "http://127.0.0.1:8080/v1")
    assert str(info.value) == (
        "--base-url is for --backend openai, not ollama: add --backend openai, or leave --base-url out"
    )


def test_the_server_reads_the_same_variables_below_its_flags(tmp_path: Path) -> None:
    """sqale-mcp takes SQALE_* too: above its config file, below its flags."""
    config = tmp_path / "s.toml"
    config.write_text('demo = true\nmodel = "from-file"\n')
    environ = {"SQALE_MODEL": "from-env", "SQALE_BACKEND": "openai", "SQALE_BASE_URL": "http://127.0.0.1:1/v1"}
    settings = parse_settings(["--config", str(config)], environ)
    assert (settings.model, settings.backend, settings.base_urls) == (
        "from-env",
        "openai",
        ("http://127.0.0.1:1/v1",),
    )
    assert parse_settings(["--config", str(config), "--model", "m"], environ).model == "m"


def test_doctor_says_which_config_file_it_read(user_config: Path, fake_openai, capsys) -> None:
    """doctor names the config file it took settings from, and its runtime-slots."""
    fake = fake_openai(OraclePolicy({}))
    user_config.write_text(f'backend = "openai"\nbase-url = "{fake.url}"\nruntime-slots = 3\n')
    main(["doctor"])
    out = capsys.readouterr().out
    assert out.startswith(f"[info] settings from {user_config} (flags and SQALE_* variables win over it)\n")
    assert "[info] runtime slots: 3 (--runtime-slots)" in out


def test_ask_exits_3_when_the_model_gives_no_runnable_sql(fake_ollama, tmp_path: Path, capsys) -> None:
    """A failed answer is printed as one, and `ask` exits 3 (also with --json): scripts can tell."""
    db = create_database(tmp_path / "t.sqlite", "CREATE TABLE t (x)")
    server = fake_ollama(ScriptPolicy(["I am not sure."]))
    assert main(["ask", "--db", str(db), "--ollama-host", server.url, "How many rows?"]) == 3
    assert capsys.readouterr().out.startswith("status: failed")
    assert main(["ask", "--json", "--db", str(db), "--ollama-host", server.url, "How many rows?"]) == 3
    assert json.loads(capsys.readouterr().out)["status"] == "failed"


@pytest.mark.parametrize("argv", [[], ["golden"]])
def test_a_command_without_its_subcommand_prints_the_choices(argv: list[str], capsys) -> None:
    """`sqale-agent` (or `sqale-agent golden`) alone: the help listing the subcommands on stderr, exit 2."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    listed = ("ask", "doctor", "eval", "golden", "report", "tool") if not argv else ("add",)
    assert err.startswith("usage: sqale-agent") and all(f"\n    {name} " in err for name in listed)
