"""The docs say what a newcomer needs and stay true: checked lines, not prose review."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from agent.commands.cli import build_parser
from agent.options import env_variables
from mcp_server.config.options_page import options_page
from mcp_server.config.server_settings import ServerSettings

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def test_no_link_points_into_the_data_folder_a_clone_lacks() -> None:
    """No Markdown link leads into ../shared (not in a clone); the data is described with where to get it."""
    links = [(p.name, m) for p in PAGES for m in re.findall(r"\]\(([^)]*shared/[^)]*)\)", p.read_text("utf-8"))]
    assert links == []
    sources = read("docs/evaluation.md")
    assert all(
        url in sources
        for url in (
            "https://yale-lily.github.io/spider",
            "https://github.com/bird-bench/mini_dev",
            "https://github.com/lerocha/chinook-database",
        )
    )


def test_defaults_are_stated_by_the_generated_page_only() -> None:
    """cli.md states no default of eval's --tool-query-timeout (it drifted: 10 written, 5 true)."""
    eval_parser = build_parser()._subparsers._group_actions[0].choices["eval"]  # type: ignore[union-attr]
    default = next(a.default for a in eval_parser._actions if a.dest == "tool_query_timeout")
    assert f"| `--tool-query-timeout SECONDS` | limit for the model's own queries (default {default:g}) |" in (
        options_page()
    )
    cli = read("docs/cli.md")
    assert not re.search(r"--tool-query-timeout[^()]{0,12}\(default \d", cli)
    assert "options.md" in cli and "options.md" in read("README.md")


def test_the_mcp_dev_note_says_how_to_pin_the_inspector_on_node_20() -> None:
    """clients.md: on Node 20 npx starts Inspector 0.15.0 silently; the fix pins 2.12.0 and Node 22 locally."""
    clients = read("docs/clients.md")
    assert "0.15.0" in clients
    assert "npm install --no-save @modelcontextprotocol/inspector@2.12.0 node@22" in clients


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_a_users_golden_file_is_not_ignored_by_git() -> None:
    """golden.jsonl (your questions) is committed; eval's results folder and summaries stay ignored."""

    def ignored(path: str) -> bool:
        return subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 0

    assert [
        ignored(p)
        for p in ("golden.jsonl", "questions/sales.jsonl", "eval-results/spider.jsonl", "run.summary.json")
    ] == [False, False, True, True]


def test_the_configuration_page_names_every_variable_and_the_precedence() -> None:
    """configuration.md names each SQALE_* variable a setting declares, and the order flag > variable > file."""
    page = read("docs/configuration.md")
    assert sorted(v for v in env_variables(ServerSettings).values() if f"`{v}`" not in page) == []
    order = [
        page.index(s)
        for s in ("the flag on the command line", "its environment variable", "the config file", "the default")
    ]
    assert order == sorted(order)


def test_the_changelogs_newest_heading_is_the_packages_version() -> None:
    """CHANGELOG.md's first `## ` heading names the version in pyproject.toml (bumped with what changed)."""
    version = re.search(r'^version = "([^"]+)"$', read("pyproject.toml"), re.MULTILINE)
    headings = re.findall(r"^## (\S+)", read("CHANGELOG.md"), re.MULTILINE)
    assert version is not None and headings[:1] == [version.group(1)]
