"""Server settings: flags, the config file and the environment, parsed once into ServerSettings."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from agent.errors import ConfigError
from agent.options import file_keys
from agent.sqlite import create_database
from agent.tools import Environment
from mcp_server.config.catalog import (
    hide_rules_by_alias,
)
from mcp_server.config.command_line import module_server_arguments, parse_settings
from mcp_server.config.server_settings import ServerSettings, is_loopback
from mcp_server.config.settings_parts import DatabaseSpec
from tests.support.server_settings import config_error


def test_flags_parse_into_settings() -> None:
    """Every flag lands in its field; secrets are read from the named environment variables."""
    settings = parse_settings(
        [
            "--db",
            "a=/x/a.db",
            "--db",
            "b=~/b.sqlite",
            "--db-dir",
            "/dbs",
            "--demo",
            "--model",
            "m",
            "--ollama-host",
            "http://o:1",
            "--max-rows",
            "5",
            "--query-timeout",
            "2",
            "--episode-timeout",
            "30",
            "--max-concurrent",
            "3",
            "--reference-agent",
            "/r.py",
            "--episode-log",
            "/l.jsonl",
            "--transport",
            "streamable-http",
            "--host",
            "0.0.0.0",
            "--port",
            "9000",
            "--auth-token-env",
            "TOK",
            "--log-level",
            "DEBUG",
        ],
        {"TOK": " s3cret "},
    )
    assert settings == ServerSettings(
        databases=(
            DatabaseSpec(alias="a", path=Path("/x/a.db")),
            DatabaseSpec(alias="b", path=Path("~/b.sqlite").expanduser()),
        ),
        db_dir=Path("/dbs"),
        demo=True,
        model="m",
        ollama_host="http://o:1",
        max_rows=5,
        query_timeout=2.0,
        episode_timeout=30.0,
        max_concurrent=3,
        reference_agent=Path("/r.py"),
        episode_log=Path("/l.jsonl"),
        transport="streamable-http",
        host="0.0.0.0",
        port=9000,
        auth_token_env="TOK",
        auth_token=SecretStr("s3cret"),
        log_level="DEBUG",
    )
    assert settings.auth_token is not None and settings.auth_token.get_secret_value() == "s3cret"


def test_defaults() -> None:
    """Without flags: stdio, loopback, the default model and limits."""
    s = parse_settings([], {})
    assert (
        s.transport,
        s.host,
        s.port,
        s.model,
        s.max_rows,
        s.max_concurrent,
        s.backend,
        s.databases,
        s.db_dir,
        s.demo,
    ) == (
        "stdio",
        "127.0.0.1",
        8000,
        "qwen3.5-2b-grpo-synsql",
        50,
        4,
        "ollama",
        (),
        None,
        False,
    )


def test_openai_backend_options() -> None:
    """--backend openai takes repeatable --base-url and reads the key from --api-key-env."""
    s = parse_settings(
        [
            "--backend",
            "openai",
            "--base-url",
            "http://a/v1",
            "--base-url",
            "http://b/v1",
            "--api-key-env",
            "KEY",
        ],
        {"KEY": "k"},
    )
    assert (s.base_urls, s.api_key) == (("http://a/v1", "http://b/v1"), SecretStr("k"))


def test_request_timeout_is_a_server_option_too() -> None:
    """--request-timeout limits one model request on the server as on the CLI (default 300 s)."""
    assert (
        parse_settings([], {}).request_timeout,
        parse_settings(["--request-timeout", "42"], {}).request_timeout,
    ) == (300.0, 42.0)


def test_config_file_fills_in_and_flags_win(tmp_path: Path) -> None:
    """TOML settings apply, relative paths are taken from the file's folder, and flags win."""
    config = tmp_path / "conf" / "sqale.toml"
    config.parent.mkdir()
    config.write_text(
        'model = "from-file"\nmax-rows = 7\nepisode_log = "log.jsonl"\n'
        'base-url = "http://x/v1"\nbackend = "openai"\n'
        '[db]\nchinook = "data/chinook.db"\nshared = "/abs/s.db"\n'
    )
    s = parse_settings(["--config", str(config), "--max-rows", "9", "--db", "shared=/flag.db"], {})
    assert (s.model, s.max_rows, s.episode_log, s.base_urls, s.databases) == (
        "from-file",
        9,
        tmp_path / "conf" / "log.jsonl",
        ("http://x/v1",),
        (
            DatabaseSpec(alias="chinook", path=tmp_path / "conf" / "data" / "chinook.db"),
            DatabaseSpec(alias="shared", path=Path("/flag.db")),
        ),
    )


def test_bad_settings_give_one_line_naming_what_and_how(tmp_path: Path) -> None:
    """Each configuration mistake is one line that names the setting and the fix."""
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("max_rows = [")
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("colour = 1")
    assert config_error(["--db", "noequals"]) == (
        "--db 'noequals': write it as ALIAS=PATH, e.g. --db chinook=~/data/chinook.db"
    )
    assert config_error(["--db", "bad alias=/x"]) == (
        "--db 'bad alias=/x': alias 'bad alias' is not usable; use letters, digits, '_', '-' or "
        "'.' (at most 64, not starting with '-' or '.')"
    )
    assert config_error(["--max-rows", "0"]) == (
        "--max-rows: Input should be greater than or equal to 1 (got 0); see `sqale-mcp --help`"
    )
    assert config_error(["--max-rows", "many"]) == (
        "argument --max-rows: invalid int value: 'many'; see `sqale-mcp --help`"
    )
    assert config_error(["--transport", "sse"]) == (
        "argument --transport: invalid choice: 'sse' (choose from 'stdio', 'streamable-http'); "
        "see `sqale-mcp --help`"
    )
    assert config_error(["--transport", "streamable-http", "--host", "0.0.0.0"]) == (
        "refusing to listen on 0.0.0.0 without authentication: set --auth-token-env NAME (the "
        "token itself goes in that environment variable), [tokens.NAME] tables in the --config "
        "file, or use --host 127.0.0.1; see "
        "`sqale-mcp --help`"
    )
    assert config_error(["--auth-token-env", "TOK"]) == (
        "--auth-token-env TOK: the environment variable TOK is not set or empty; export "
        "TOK=<secret> before starting the server"
    )
    assert config_error(["--auth-token-env", "abc=def"]) == (
        "--auth-token-env 'abc=def': give the NAME of an environment variable, not its value"
    )
    assert config_error(["--backend", "openai"]) == (
        "--backend openai needs at least one --base-url (e.g. http://host:8000/v1); see `sqale-mcp --help`"
    )
    assert config_error(["--backend", "openai", "--base-url", "host:8000/v1"]) == (
        "--base-url 'host:8000/v1' must start with http:// or https:// (e.g. http://127.0.0.1:8000/v1); "
        "see `sqale-mcp --help`"
    )
    assert config_error(["--base-url", "http://h/v1"]) == (
        "--base-url is for --backend openai, not ollama: add --backend openai, or leave --base-url out; "
        "see `sqale-mcp --help`"
    )
    assert config_error(["--config", str(tmp_path / "none.toml")]) == (
        f"--config {tmp_path / 'none.toml'}: no such file; check the path"
    )
    assert config_error(["--config", str(bad_toml)]).startswith(f"--config {bad_toml}: not valid TOML (")
    assert config_error(["--config", str(unknown)]) == (
        f"--config {unknown}: unknown setting 'colour'; a key is a long option without `--` (`max-rows`): "
        "docs/options.md lists them, as `--help` does"
    )


def test_loopback_detection() -> None:
    """localhost and loopback literals are loopback; everything else is not."""
    assert [
        is_loopback(h)
        for h in ("127.0.0.1", "localhost", "::1", "[::1]", "127.1.2.3", "0.0.0.0", "10.0.0.1", "example.com")
    ] == [True, True, True, True, True, False, False, False]


def test_module_server_arguments_come_from_env_then_config_then_demo(tmp_path: Path) -> None:
    """`mcp dev`/`mcp run`: SQALE_MCP_ARGS first, then the default config file, then --demo."""
    config = tmp_path / "sqale-mcp" / "config.toml"
    environ = {"XDG_CONFIG_HOME": str(tmp_path)}
    assert module_server_arguments(environ) == (["--demo"], f"no SQALE_MCP_ARGS and no {config}: --demo")
    config.parent.mkdir()
    config.write_text("demo = true\n")
    assert module_server_arguments(environ) == (["--config", str(config)], str(config))
    environ["SQALE_MCP_ARGS"] = "--db 'my db=/a b.db' --max-rows 3"
    assert module_server_arguments(environ) == (
        ["--db", "my db=/a b.db", "--max-rows", "3"],
        "SQALE_MCP_ARGS=\"--db 'my db=/a b.db' --max-rows 3\"",
    )


def test_prompt_files_come_from_flags_or_the_config_file(tmp_path: Path) -> None:
    """--system-prompt/--user-template are paths; in a config file relative to the file."""
    from mcp_server.state import server_prompts

    (tmp_path / "system.txt").write_text("SYS")
    (tmp_path / "user.txt").write_text("U {question}")
    config = tmp_path / "sqale.toml"
    config.write_text('system-prompt = "system.txt"\n')
    s = parse_settings(["--config", str(config), "--user-template", str(tmp_path / "user.txt")], {})
    assert (s.system_prompt, s.user_template) == (tmp_path / "system.txt", tmp_path / "user.txt")
    prompts = server_prompts(s)
    assert (prompts.system, prompts.user_template) == ("SYS", "U {question}")


def test_max_result_bytes_is_a_setting_with_a_floor() -> None:
    """--max-result-bytes sets the answer's byte budget (default 16,384); below 4 KiB is refused."""
    assert parse_settings(["--demo"], {}).max_result_bytes == 16_384
    assert parse_settings(["--demo", "--max-result-bytes", "100000"], {}).max_result_bytes == 100_000
    assert config_error(["--demo", "--max-result-bytes", "10"]) == (
        "--max-result-bytes: Input should be greater than or equal to 4096 (got 10); see `sqale-mcp --help`"
    )


def test_hide_rules_come_from_flags_and_the_config_file(tmp_path: Path) -> None:
    """--hide ALIAS=RULE (repeatable) adds to the file's [hide] lists; bad rules are one line."""
    config = tmp_path / "s.toml"
    config.write_text(
        '[db]\nshop = "shop.db"\n[hide]\nshop = ["Customer.Email", "Invoice"]\nother = "*.password*"\n'
    )
    settings = parse_settings(
        ["--config", str(config), "--hide", "shop=Employee.BirthDate", "--hide", "x=T"], {}
    )
    assert [(h.alias, h.rules) for h in settings.hide] == [
        ("shop", ("Customer.Email", "Invoice", "Employee.BirthDate")),
        ("other", ("*.password*",)),
        ("x", ("T",)),
    ]
    for argv, message in [
        (
            ["--hide", "shop"],
            "--hide 'shop': write it as ALIAS=TABLE or ALIAS=TABLE.COLUMN, e.g. --hide chinook=Customer.Email",
        ),
        (
            ["--hide", "shop=Customer."],
            "--hide 'shop=Customer.': 'Customer.' is not a rule; write "
            'TABLE or TABLE.COLUMN, e.g. "Customer.Email", "Invoice" '
            'or "*.password*"',
        ),
    ]:
        with pytest.raises(ConfigError) as info:
            parse_settings(argv, {})
        assert str(info.value) == message
    config.write_text("[hide]\nshop = [1]\n")
    with pytest.raises(ConfigError, match=r"hide\.shop must be a list of"):
        parse_settings(["--config", str(config)], {})


def test_hide_rules_for_an_unserved_alias_stop_start_up(tmp_path: Path) -> None:
    """A rule about an alias that is not served is an error naming the served aliases."""
    path = create_database(tmp_path / "a.db", "CREATE TABLE t (x);")
    settings = parse_settings(["--db", f"a={path}", "--hide", "b=t"], {})
    with pytest.raises(ConfigError) as info:
        hide_rules_by_alias(settings, settings.databases)
    assert str(info.value) == "--hide b=...: no database is served as 'b'; the aliases are a"


def test_environment_from_flag_or_config_file(tmp_path: Path) -> None:
    """Trained texts by default; rich from --environment or `environment = "rich"`; typos name the choices."""
    config = tmp_path / "sqale.toml"
    config.write_text('environment = "rich"\n')
    wrong = tmp_path / "wrong.toml"
    wrong.write_text('environment = "richer"\n')
    assert [
        parse_settings(argv, {}).environment
        for argv in (
            ["--demo"],
            ["--demo", "--environment", "rich"],
            ["--config", str(config)],
            ["--config", str(config), "--environment", "trained"],
        )
    ] == [Environment.TRAINED, Environment.RICH, Environment.RICH, Environment.TRAINED]
    assert config_error(["--environment", "richer"]) == (
        "argument --environment: invalid choice: 'richer' (choose from 'trained', 'rich'); "
        "did you mean rich? (see `sqale-mcp --help`)"
    )
    assert config_error(["--config", str(wrong)]) == (
        "--environment: Input should be 'trained' or 'rich' (got 'richer'); see `sqale-mcp --help`"
    )


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--demo", "--ollama-host", "not a url"],
            "Ollama host 'not a url' is not a valid address; give HOST:PORT or a URL like http://127.0.0.1:11434.",
        ),
        (
            ["--demo", "--keep-alive", "forever"],
            "--keep-alive: not a duration; give seconds (300, -1 for ever) or a number with a unit: 30m, 1h, "
            "90s (got 'forever'); see `sqale-mcp --help`",
        ),
        (
            ["--demo", "--max-rows", "-5"],
            "--max-rows: Input should be greater than or equal to 1 (got -5); see `sqale-mcp --help`",
        ),
        (
            ["--db", "x=/a.db", "--db", "x=/b.db"],
            "database alias 'x' is given twice (--db x=/a.db and --db x=/b.db); rename one with "
            "--db OTHER_ALIAS=PATH",
        ),
    ],
)
def test_bad_values_are_refused_with_one_line(
    argv: list[str], line: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    """`sqale-mcp` refuses each bad value before serving: exit 2 and one stderr line."""
    from mcp_server.__main__ import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert main(argv) == 2
    assert capsys.readouterr() == ("", f"sqale-mcp: {line}\n")


def test_log_level_takes_any_case(tmp_path: Path) -> None:
    """--log-level debug and log-level = "warning" in a config file are accepted."""
    config = tmp_path / "c.toml"
    config.write_text('demo = true\nlog-level = "warning"\n')
    assert parse_settings(["--demo", "--log-level", "debug"], {}).log_level == "DEBUG"
    assert parse_settings(["--config", str(config)], {}).log_level == "WARNING"


def test_plain_start_reads_the_user_config_with_paths_relative_to_it(tmp_path: Path) -> None:
    """No database option and no --config: $XDG_CONFIG_HOME/sqale-mcp/config.toml; its paths are its own."""
    folder = tmp_path / "config" / "sqale-mcp"
    folder.mkdir(parents=True)
    (folder / "config.toml").write_text(
        'episode-log = "logs/episodes.jsonl"\nmax-rows = 7\n[db]\nshop = "data/shop.db"\n'
    )
    environ = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    settings = parse_settings([], environ)
    assert (settings.databases, settings.episode_log, settings.max_rows) == (
        (DatabaseSpec(alias="shop", path=folder / "data" / "shop.db"),),
        folder / "logs" / "episodes.jsonl",
        7,
    )
    assert parse_settings(["--demo"], environ).databases == ()  # a database option: the file is not read


def test_every_config_key_is_documented_in_the_options_page(tmp_path: Path) -> None:
    """Each key the config file accepts is named in docs/options.md (where its error refers to them)."""
    known = list(file_keys(ServerSettings))
    readme = (Path(__file__).resolve().parents[3] / "docs" / "options.md").read_text(encoding="utf-8")
    assert "db" in known and "max-question-chars" in known
    documented = ("`{}`", "`[{}]`", "`--{} ", "`--{}`", "`[{}.")
    assert [key for key in known if not any(form.format(key) in readme for form in documented)] == []


def test_every_secret_is_read_from_the_variable_its_env_setting_names() -> None:
    """Each SecretStr field X has its setting X_env, read the same way for all: the value of that
    variable, and one line naming the flag when it is unset."""
    from agent.options import is_secret

    secrets = [name for name, field in ServerSettings.model_fields.items() if is_secret(field)]
    assert secrets == ["api_key", "request_state_key", "auth_token", "metrics_token"]
    assert all(f"{name}_env" in ServerSettings.model_fields for name in secrets)
    argv = [
        "--backend",
        "openai",
        "--base-url",
        "http://127.0.0.1:1/v1",
        "--api-key-env",
        "K",
        "--request-state-key-env",
        "S",
        "--auth-token-env",
        "A",
        "--metrics-token-env",
        "M",
    ]
    key = "s" * 32
    settings = parse_settings(argv, {"K": "k", "S": key, "A": "a", "M": "m"})
    assert [getattr(settings, name) for name in secrets] == [
        SecretStr("k"),
        SecretStr(key),
        SecretStr("a"),
        SecretStr("m"),
    ]
    assert config_error(argv, {"K": "k", "S": key, "A": "a"}) == (
        "--metrics-token-env M: the environment variable M is not set or empty; export M=<secret> "
        "before starting the server"
    )
