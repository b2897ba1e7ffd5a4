"""A mistyped option, subcommand, choice or config key is refused with the nearest one named, as a class:
every option of every parser of both commands, every key of every config-file table."""

from __future__ import annotations

import argparse
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.backends.registry import BackendSettings
from agent.commands.argparse_shim import option_strings, subcommands
from agent.commands.cli import build_parser, main
from agent.errors import ConfigError
from agent.options import file_keys
from mcp_server.config.command_line import build_parser as server_parser
from mcp_server.config.command_line import parse_settings
from mcp_server.config.server_settings import ServerSettings
from mcp_server.config.settings_parts import TokenSpec
from tests.support.console import console_script


def mistyped(option: str) -> str:
    """`option` with a letter dropped from its middle (not its end: argparse takes a prefix)."""
    name = option.lstrip("-")
    cut = len(name) // 2
    return option[: len(option) - len(name)] + name[:cut] + name[cut + 1 :]


def every_parser() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    agent = build_parser()
    for parser in (agent, *subcommands(agent), server_parser()):
        yield parser.prog, parser


CASES = [
    (prog, parser, option)
    for prog, parser in every_parser()
    for option in option_strings(parser)
    if option.startswith("--") and len(option) > 5
]


@pytest.mark.parametrize(("prog", "parser", "option"), CASES, ids=[f"{p} {o}" for p, _, o in CASES])
def test_every_option_mistyped_is_named_with_the_nearest(
    prog: str, parser: argparse.ArgumentParser, option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each long option of `sqale-agent`, its commands and `sqale-mcp`, one letter short in the middle, is
    refused as unknown (before any error it causes, such as a required option missing), naming it."""
    typo = mistyped(option)
    if typo in option_strings(parser) or any(o.startswith(typo) for o in option_strings(parser)):
        pytest.skip(f"{typo} is another option of {prog}, or the start of one")
    said = f"unknown option {typo}; did you mean {option}?"
    if prog == "sqale-mcp":
        with pytest.raises(ConfigError) as info:
            parser.parse_args([typo, "1"])
        assert str(info.value) == f"{said} (see `sqale-mcp --help`)"
        return
    with pytest.raises(SystemExit) as exited:
        parser.parse_args([typo, "1"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"{prog}: error: {said}"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["ask", "--db", "d.db", "--samles", "3", "How many?"],
            "sqale-agent ask: error: unknown option --samles; did you mean --samples?",
        ),
        (
            ["ask", "--db", "d.db", "--samles=3", "How many?"],
            "sqale-agent ask: error: unknown option --samles; did you mean --samples?",
        ),
        (
            ["ask", "--samles", "3", "How many?"],
            "sqale-agent ask: error: unknown option --samles; did you mean --samples?",
        ),
        (
            ["ask", "--db", "d.db", "How", "many?"],
            "sqale-agent ask: error: unexpected argument: many? (put a "
            "question, or a value with spaces, in quotes)",
        ),
        (
            ["aks", "--db", "d.db", "q"],
            "sqale-agent: error: argument COMMAND: invalid choice: 'aks' (choose from "
            "'ask', 'doctor', 'eval', 'golden', 'report', 'tool'); did you mean ask?",
        ),
        (
            ["ask", "--db", "d.db", "--backend", "olama", "q"],
            "sqale-agent ask: error: argument --backend: "
            "invalid choice: 'olama' (choose from 'ollama', "
            "'openai'); did you mean ollama?",
        ),
        (["--verison"], "sqale-agent: error: unknown option --verison; did you mean --version?"),
        (
            ["golden", "ad"],
            "sqale-agent golden: error: argument ACTION: invalid choice: 'ad' (choose from 'add', "
            "'proposals', 'accept', 'reject'); did you mean add?",
        ),
    ],
)
def test_a_typo_before_the_question_never_becomes_the_question(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ask --db d --samles 3 "q"` stops at the unknown option (argparse alone took `3` as the question and
    `--samles q` as stray arguments); a bare subcommand or choice typo names the nearest one."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == said


def test_values_that_start_with_a_dash_are_not_options() -> None:
    """A negative number, a value with spaces and anything after `--` are arguments, not typos."""
    args = build_parser(only=("ask",)).parse_args(
        ["ask", "--db", "d.db", "--evidence", "-x means minus x", "--", "-what?"]
    )
    assert (args.evidence, args.question) == ("-x means minus x", "-what?")
    args = build_parser(only=("tool",)).parse_args(["tool", "--db", "d.db", "sample_rows", "-5"])
    assert args.tool_args == "-5"


@pytest.mark.parametrize(("model", "where"), [(ServerSettings, ""), (TokenSpec, '[tokens.a]\nenv = "TOK"\n')])
def test_every_config_key_mistyped_is_named_with_the_nearest(model: type, where: str, tmp_path: Path) -> None:
    """Each key of the file's top level and of a [tokens.NAME] table, one letter short (underscores for
    dashes), is refused naming the key meant, not listing all of them."""
    keys = [k for k in file_keys(model) if len(k) > 3]
    assert keys
    config = tmp_path / "c.toml"
    for key in keys:
        typo = mistyped(key).replace("-", "_")
        config.write_text(f"{typo} = 1\n" if not where else f"{where}{typo} = 1\n")
        with pytest.raises(ConfigError) as info:
            parse_settings(["--config", str(config), "--demo"], {"TOK": "secret-a"})
        assert str(info.value).endswith(f"unknown setting '{typo}'; did you mean '{key}'?"), (key, info.value)


def test_the_issue_examples_from_the_installed_commands(tmp_path: Path) -> None:
    """`sqale-mcp --dbdir X` and a `max_row` key, as a user runs them: one line naming the nearest."""
    done = subprocess.run(
        [console_script("sqale-mcp"), "--dbdir", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (
        2,
        "sqale-mcp: unknown option --dbdir; did you mean --db-dir? (see `sqale-mcp --help`)\n",
    )
    (tmp_path / "c.toml").write_text("max_row = 5\n")
    done = subprocess.run(
        [console_script("sqale-mcp"), "--config", str(tmp_path / "c.toml")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (
        2,
        f"sqale-mcp: --config {tmp_path / 'c.toml'}: unknown setting 'max_row'; did you mean 'max-rows'?\n",
    )


def test_backend_keys_are_among_the_server_keys() -> None:
    """The model runtime's keys (which `sqale-agent` reads from the same file) are server keys too, so a
    typo of one is caught by the server's check."""
    assert set(file_keys(BackendSettings)) <= set(file_keys(ServerSettings))
