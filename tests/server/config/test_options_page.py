"""docs/options.md is generated from the parsers, and every setting is declared once with its help."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from agent.agent_settings import AgentSettings
from agent.commands.argparse_shim import option_groups, subcommands
from agent.commands.cli import build_parser as agent_parser
from agent.options import file_keys, help_text, is_secret, option_of
from mcp_server.config.command_line import build_parser as server_parser
from mcp_server.config.options_page import GENERATOR, PAGE, _cell, _typed, main, options_page
from mcp_server.config.server_settings import ServerSettings

ROOT = Path(__file__).resolve().parents[3]


def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [action for _, actions in option_groups(parser) for action in actions]


def _options(parser: argparse.ArgumentParser) -> set[str]:
    """Every long option of `parser` and of its subcommands."""
    return {
        o
        for p in (parser, *subcommands(parser))
        for a in _actions(p)
        for o in a.option_strings
        if o.startswith("--")
    }


def test_the_options_page_is_up_to_date() -> None:
    """docs/options.md is what the generator writes from today's parsers (Datasette-style)."""
    assert PAGE == ROOT / "docs" / "options.md"
    assert PAGE.read_text(encoding="utf-8") == options_page(), f"docs/options.md is stale: run `{GENERATOR}`"


def test_the_generator_writes_and_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--output` writes the page; `--check` exits 1 on a stale page, naming the command that fixes it."""
    page = tmp_path / "options.md"
    assert main(["--output", str(page), "--check"]) == 1
    assert capsys.readouterr().err == f"{page} is stale: run `{GENERATOR}`\n"
    assert (main(["--output", str(page)]), main(["--output", str(page), "--check"])) == (0, 0)
    assert page.read_text(encoding="utf-8") == options_page()


def test_every_option_of_both_commands_is_on_the_page() -> None:
    """Each long option of sqale-mcp and of every sqale-agent command appears on the page as typed."""
    page = options_page()
    missing = [
        o
        for o in sorted(_options(server_parser()) | _options(agent_parser()))
        if f"`{o}`" not in page and f"`{o} " not in page
    ]
    assert missing == []


def test_every_setting_has_a_description_and_a_flag_or_a_key() -> None:
    """No field of the settings lacks its help; each is a flag or a config-file key (secrets: neither)."""
    for model in (AgentSettings, ServerSettings):
        for name, field in model.model_fields.items():
            if is_secret(field):  # read from the variable another setting names: never a key
                assert name not in file_keys(model).values()
                continue
            assert help_text(model, name)
    server_flags = _options(server_parser())
    keys = file_keys(ServerSettings)
    assert (
        sorted(
            k
            for k, name in keys.items()
            if option_of(ServerSettings.model_fields[name]).flag and f"--{k}" not in server_flags
        )
        == []
    )


def test_the_servers_rows_are_its_flags_as_help_shows_them() -> None:
    """Each sqale-mcp row, written from the declared settings, is the row its parser's option would
    give (the flag as typed, the same help), in --help's order: the page reads no server parser."""
    page = options_page()
    server_part = page[page.index("## sqale-mcp") : page.index("### Only in the config file")]
    rows = [
        line.split(" | ")[0] + " | " + line.rsplit(" | ", 1)[1]
        for line in server_part.splitlines()
        if line.startswith("| `-")
    ]
    assert rows == [
        f"| {_typed(a)} | {_cell((a.help or '').replace('%%', '%'))} |" for a in _actions(server_parser())
    ]


def test_the_help_and_the_page_say_max_concurrent_counts_episodes() -> None:
    """`sqale-mcp --help` says --max-concurrent counts episodes (a question with K samples takes K)."""
    text = server_parser().format_help()
    assert "episodes answered at once (a question with K samples takes K)" in " ".join(text.split())


def test_shared_settings_have_one_help_in_both_front_ends() -> None:
    """A setting both front ends take (--max-rows, --samples, --environment...) reads the same in both."""

    def helps(parser: argparse.ArgumentParser) -> dict[str, str]:
        return {max(a.option_strings, key=len): a.help or "" for a in _actions(parser) if a.option_strings}

    server = helps(server_parser())
    ask = helps(next(p for p in subcommands(agent_parser()) if p.prog == "sqale-agent ask"))
    shared = [
        "--max-rows",
        "--samples",
        "--seed",
        "--max-notes-chars",
        "--environment",
        "--backend",
        "--model",
        "--base-url",
        "--reference-agent",
    ]
    assert {o: ask[o] for o in shared} == {o: server[o] for o in shared}
    # The server's own default (16 KiB: MCP clients' limits) and what is true of it only, after the same text.
    described = AgentSettings.model_fields["max_result_bytes"].description
    assert ask["--max-result-bytes"] == f"{described} (default 262,144)"
    assert server["--max-result-bytes"].startswith(f"{described}; past the default")
    assert server["--max-result-bytes"].endswith("(default 16,384)")


@pytest.mark.slow
def test_the_generator_runs_as_a_module(tmp_path: Path) -> None:
    """`python -m mcp_server.config.options_page --check` passes on this checkout, from another folder."""
    done = subprocess.run(
        [sys.executable, "-m", "mcp_server.config.options_page", "--check", "--output", str(PAGE)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (0, "")
