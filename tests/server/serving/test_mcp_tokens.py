"""Tokens with scopes in the config file, the token table, the minute window, scoped schemas, JSON logs."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from agent.errors import ConfigError
from mcp_server.answer.view import advertised_input_schema
from mcp_server.config.command_line import parse_settings
from mcp_server.serving.access import Caller, CallerToken, token_table
from mcp_server.serving.log_format import JsonLogFormatter
from mcp_server.serving.quotas import MinuteWindow, QuotaExceeded

ENV = {"TOK_A": "secret-a", "TOK_B": "secret-b", "TOK_MAIN": "secret-main"}


def settings_from(tmp_path: Path, toml: str, *flags: str, environ: dict[str, str] | None = None):
    """Settings parsed from a config file holding `toml`."""
    config = tmp_path / "c.toml"
    config.write_text(toml)
    return parse_settings(["--config", str(config), *flags], ENV if environ is None else environ)


def config_error(tmp_path: Path, toml: str, environ: dict[str, str] | None = None) -> str:
    """The ConfigError message for a config file holding `toml`."""
    with pytest.raises(ConfigError) as info:
        settings_from(tmp_path, toml, environ=environ)
    return str(info.value)


def test_token_tables_parse_with_secrets_from_the_environment(tmp_path: Path) -> None:
    """[tokens.NAME] gives name, env, secret, scope and quotas (dashed or underscored keys)."""
    settings = settings_from(
        tmp_path,
        '[tokens.a]\nenv = "TOK_A"\ndatabases = ["sales"]\n'
        'max-concurrent = 2\nquestions_per_minute = 9\n[tokens.b]\nenv = "TOK_B"\n',
    )
    a, b = settings.tokens
    assert (
        a.name,
        a.env,
        a.secret.get_secret_value(),
        a.databases,
        a.max_concurrent,
        a.questions_per_minute,
    ) == ("a", "TOK_A", "secret-a", ("sales",), 2, 9)
    assert (b.name, b.databases, b.max_concurrent, b.questions_per_minute) == ("b", None, None, None)
    assert "secret-a" not in repr(settings)


def test_token_tables_refuse_what_they_cannot_use(tmp_path: Path) -> None:
    """A missing variable, an unknown key or an empty scope: one line saying what to fix."""
    where = f"--config {tmp_path / 'c.toml'}: tokens.a"
    assert config_error(tmp_path, '[tokens.a]\nenv = "TOK_X"\n') == (
        f"{where}.env TOK_X: the environment variable TOK_X is not set or empty; export "
        "TOK_X=<secret> before starting the server"
    )
    assert config_error(tmp_path, '[tokens.a]\nenv = "TOK_A"\ntoken = "x"\n') == (
        f"{where}: unknown setting 'token'; known: databases, env, max-concurrent, max-sessions, "
        "questions-per-minute, save-verified"
    )
    assert config_error(tmp_path, '[tokens.a]\nenv = "TOK_A"\ndatabases = []\n') == (
        f"{where}.databases: give a non-empty list of aliases, e.g. databases = "
        '["sales", "chinook"] (leave it out for all) (got [])'
    )


def test_token_tables_are_validated_by_their_model(tmp_path: Path) -> None:
    """A key of [tokens.NAME] is checked as TokenSpec declares it and named as `tokens.NAME.key`
    (not as a server flag); `secret` and `name` are no keys: the token never sits in the file."""
    where = f"--config {tmp_path / 'c.toml'}: tokens.a"
    assert config_error(tmp_path, '[tokens.a]\nenv = "TOK_A"\nmax-concurrent = 0\n') == (
        f"{where}.max-concurrent: Input should be greater than or equal to 1 (got 0)"
    )
    assert config_error(tmp_path, '[tokens.a]\nenv = "TOK_A"\nquestions_per_minute = "many"\n') == (
        f"{where}.questions-per-minute: Input should be a valid integer, unable to parse string as an "
        "integer (got 'many')"
    )
    assert config_error(tmp_path, '[tokens.a]\nenv = "TOK_A"\ndatabases = ["sales", 3]\n') == (
        f"{where}.databases.1: Input should be a valid string (got 3)"
    )
    for key in ("secret", "name"):
        assert config_error(tmp_path, f'[tokens.a]\nenv = "TOK_A"\n{key} = "x"\n').startswith(
            f"{where}: unknown setting '{key}'; known: databases, env,"
        )


def test_token_table_checks_scopes_and_finds_callers(tmp_path: Path) -> None:
    """Scopes name configured aliases; each token finds its caller; a wrong one finds none."""
    settings = settings_from(
        tmp_path, '[tokens.a]\nenv = "TOK_A"\ndatabases = ["sales"]\n', "--auth-token-env", "TOK_MAIN"
    )
    table = token_table(settings, ("sales", "hr"))
    assert table.find(b"secret-a") == Caller("a", ("sales",))
    assert table.find(b"secret-main") == Caller("default")
    assert table.find(b"secret-") is None
    assert Caller("a", ("sales",)).visible(("hr", "sales")) == ("sales",)
    with pytest.raises(ConfigError, match=r"tokens\.a: database 'sales' is not configured; configured: hr"):
        token_table(settings, ("hr",))
    with pytest.raises(ConfigError, match=r"database 'sales' is not configured; did you mean 'saels'\?"):
        token_table(settings, ("saels", "hr"))


def test_two_tokens_with_one_value_are_refused(tmp_path: Path) -> None:
    """Two tokens sharing a secret could not be told apart: refused at start."""
    settings = settings_from(
        tmp_path,
        '[tokens.a]\nenv = "TOK_A"\n[tokens.b]\nenv = "TOK_B"\n',
        environ={"TOK_A": "same", "TOK_B": "same"},
    )
    with pytest.raises(ConfigError, match="two tokens have the same value"):
        token_table(settings, ("sales",))


@pytest.mark.anyio
async def test_the_token_table_is_the_sdks_token_verifier(tmp_path: Path) -> None:
    """verify_token gives the SDK an AccessToken naming the token (never its value) with its Caller;
    a wrong token gives None."""
    settings = settings_from(tmp_path, '[tokens.a]\nenv = "TOK_A"\ndatabases = ["sales"]\n')
    table = token_table(settings, ("sales",))
    found = await table.verify_token("secret-a")
    assert found == CallerToken(token="a", client_id="a", scopes=[], caller=Caller("a", ("sales",)))
    assert "secret-a" not in repr(found)
    assert await table.verify_token("secret-") is None
    assert await table.verify_token("sécret") is None


def test_a_token_with_a_comma_is_refused_at_start(tmp_path: Path) -> None:
    """A token holding a comma could never be sent (it reads as two joined): refused at start,
    the metrics token too."""
    settings = settings_from(
        tmp_path,
        '[tokens.a]\nenv = "TOK_A"\n',
        "--metrics-token-env",
        "TOK_M",
        environ={"TOK_A": "one,two", "TOK_M": "m,m"},
    )
    with pytest.raises(ConfigError) as info:
        token_table(settings, ("sales",))
    assert str(info.value) == (
        "a, the metrics token: a token may not contain ',' (the server reads a comma in an "
        "Authorization header as two tokens joined); give it a value without one, e.g. from: python "
        "-c 'import secrets; print(secrets.token_urlsafe(32))'"
    )


def test_minute_window_admits_the_limit_then_says_when() -> None:
    """Two per minute: the third waits until the first leaves the window."""
    now = [100.0]
    window = MinuteWindow(2, clock=lambda: now[0])
    assert [window.retry_after(), window.retry_after()] == [None, None]
    now[0] = 130.0
    assert window.retry_after() == 30.0
    now[0] = 160.0
    assert window.retry_after() is None
    assert str(QuotaExceeded("a", 2, 0.2)) == (
        "Too many questions: token 'a' may ask 2 per minute. Retry in 1 s."
    )


def test_scoped_schema_keeps_only_the_callers_aliases() -> None:
    """The schema advertised to a caller has only the caller's aliases in its enum; the function's own
    schema it is made from is untouched."""
    database = {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Database"}
    schema = {"type": "object", "properties": {"question": {"type": "string"}, "database": database}}
    scoped = advertised_input_schema(
        schema,
        aliases=("hr",),
        max_question_chars=100,
        max_evidence_chars=10,
        max_samples=3,
        example="How many?",
    )
    assert scoped == {
        "type": "object",
        "properties": {
            "question": {
                "type": "string",
                "description": "The question in plain language, e.g. 'How many?'",
                "maxLength": 100,
                "examples": ["How many?"],
            },
            "database": {"title": "Database", "type": "string", "enum": ["hr"]},
        },
    }
    assert schema["properties"] == {"question": {"type": "string"}, "database": database}


def test_json_log_lines_carry_time_level_event_and_question_id() -> None:
    """--log-format json: one object per record; question_id is null outside a question."""
    formatter = JsonLogFormatter()
    record = logging.LogRecord(
        "mcp_server.answer.audit", logging.INFO, __file__, 1, "answered on '%s'", ("sales",), None
    )
    record.created = 0.0
    record.question_id, record.token = "abc123", "analytics"
    plain = logging.LogRecord("mcp_server", logging.WARNING, __file__, 1, "slow", (), None)
    plain.created = 0.0
    assert [json.loads(formatter.format(r)) for r in (record, plain)] == [
        {
            "time": "1970-01-01T00:00:00.000+00:00",
            "level": "info",
            "event": "answered on 'sales'",
            "logger": "mcp_server.answer.audit",
            "question_id": "abc123",
            "token": "analytics",
        },
        {
            "time": "1970-01-01T00:00:00.000+00:00",
            "level": "warning",
            "event": "slow",
            "logger": "mcp_server",
            "question_id": None,
        },
    ]
