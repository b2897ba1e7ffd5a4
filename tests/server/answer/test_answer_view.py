"""The answer view on the server side: who sees it, the page it serves, the setting that turns it off."""

from __future__ import annotations

import base64
import hashlib
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID

from mcp_server.answer.door import CHOOSE_TOOL_NAME as CHOOSE
from mcp_server.answer.view import RESULT_META_KEY, VIEW_URI, AnswerView, view_html
from mcp_server.app import build_server
from mcp_server.config.command_line import parse_settings
from tests.support.mcp import BOOK_GOLD, REPO, TOOL
from tests.support.mcp_in_process import build
from tests.support.policies import OraclePolicy, PolicyBackend
from tests.support.wire import apps_extension

pytestmark = pytest.mark.anyio

QUESTION = "How many books are there?"
SAVE = "save_verified_answer"


def demo(tmp_path: Path, *flags: str) -> Any:
    return build(tmp_path, ["--demo", *flags], PolicyBackend(OraclePolicy(BOOK_GOLD)))


def with_save_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A server whose view offers an app-only save tool, registered as issue 27 will; its calls in `.saved`."""
    saved: list[dict[str, Any]] = []

    def save_verified_answer(database: str, question: str, sql: str, evidence: str | None = None) -> str:
        saved.append({"database": database, "question": question, "sql": sql, "evidence": evidence})
        return "saved"

    class ViewWithSave(AnswerView):
        def __init__(self) -> None:
            super().__init__()
            self.app_tool(
                save_verified_answer,
                name=SAVE,
                title="Save as verified",
                description="Save this question's SQL in the verified library",
            )

    monkeypatch.setattr("mcp_server.app.AnswerView", ViewWithSave)
    server = demo(tmp_path)
    server.saved = saved
    return server


async def listing(server: Any, *, apps: bool) -> tuple[list[Any], list[Any], dict[str, Any] | None]:
    async with Client(server, extensions=[apps_extension()] if apps else None) as client:
        tools = (await client.list_tools()).tools
        resources = (await client.list_resources()).resources
        return tools, resources, client.server_capabilities.extensions


async def test_an_apps_client_sees_the_view_on_the_one_tool(tmp_path: Path) -> None:
    """tools/list: the tool pointing at the ui:// view, and the view's app-only "Use this answer";
    resources/list: the view; the extension advertised."""
    tools, resources, extensions = await listing(demo(tmp_path), apps=True)
    app_only = {"ui": {"resourceUri": VIEW_URI, "visibility": ["app"]}}
    assert [(t.name, t.meta) for t in tools] == [(TOOL, {"ui": {"resourceUri": VIEW_URI}}), (CHOOSE, app_only)]
    assert [(r.uri, r.mime_type, r.meta) for r in resources] == [
        (VIEW_URI, APP_MIME_TYPE, {"ui": {"permissions": {"clipboardWrite": {}}, "prefersBorder": True}})
    ]
    assert extensions == {EXTENSION_ID: {}}


async def test_a_client_without_apps_sees_neither_the_view_nor_its_link(tmp_path: Path) -> None:
    """The same tool without _meta, no resources; the server still reads the view to anyone asking."""
    tools, resources, _ = await listing(demo(tmp_path), apps=False)
    assert [(t.name, t.meta) for t in tools] == [(TOOL, None)]
    assert resources == []


async def test_resources_read_returns_the_page(tmp_path: Path) -> None:
    """The page, as text/html;profile=mcp-app, under 80 KB, equal to view_html()."""
    async with Client(demo(tmp_path), extensions=[apps_extension()]) as client:
        [content] = (await client.read_resource(VIEW_URI)).contents
    assert (content.uri, content.mime_type) == (VIEW_URI, APP_MIME_TYPE)
    assert content.text == view_html()  # type: ignore[union-attr]
    assert len(content.text.encode()) < 80_000  # type: ignore[union-attr]


async def test_no_answer_view_leaves_the_server_as_it_was(tmp_path: Path) -> None:
    """--no-answer-view: no extension, no resource, no _meta even for an Apps client."""
    tools, resources, extensions = await listing(demo(tmp_path, "--no-answer-view"), apps=True)
    assert [(t.name, t.meta) for t in tools] == [(TOOL, None)]
    assert (resources, extensions) == ([], None)


async def test_an_app_only_tool_is_listed_and_callable_only_by_apps_clients(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The save tool: listed with visibility app and callable for Apps hosts; unknown to the others."""
    server = with_save_tool(tmp_path / "a", monkeypatch)
    async with Client(server, extensions=[apps_extension()]) as client:
        tools = {t.name: t.meta for t in (await client.list_tools()).tools}
        saved = await client.call_tool(SAVE, {"database": "bookshop", "question": "q", "sql": "SELECT 1"})
        answered = await client.call_tool(TOOL, {"question": QUESTION})
    assert tools == {
        TOOL: {"ui": {"resourceUri": VIEW_URI}},
        SAVE: {"ui": {"resourceUri": VIEW_URI, "visibility": ["app"]}},
        CHOOSE: {"ui": {"resourceUri": VIEW_URI, "visibility": ["app"]}},
    }
    assert (saved.is_error, server.saved) == (
        False,
        [{"database": "bookshop", "question": "q", "sql": "SELECT 1", "evidence": None}],
    )
    assert answered.meta is not None and answered.meta[RESULT_META_KEY] == {"appTools": [SAVE]}

    server = with_save_tool(tmp_path / "b", monkeypatch)
    async with Client(server) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        refused = await client.call_tool(SAVE, {"database": "bookshop", "question": "q", "sql": "SELECT 1"})
        answered = await client.call_tool(TOOL, {"question": QUESTION})
    assert names == [TOOL]
    assert (refused.is_error, refused.content[0].text, server.saved) == (  # type: ignore[union-attr]
        True,
        f"Unknown tool: {SAVE}",
        [],
    )
    assert answered.meta is None or RESULT_META_KEY not in answered.meta


async def test_without_app_tools_an_apps_client_gets_the_plain_result(tmp_path: Path) -> None:
    """No app-only tool registered: the tool result carries no view _meta."""
    async with Client(demo(tmp_path), extensions=[apps_extension()]) as client:
        answered = await client.call_tool(TOOL, {"question": QUESTION})
    assert answered.structured_content is not None and answered.structured_content["rows"] == [[16]]
    assert answered.meta is None or RESULT_META_KEY not in answered.meta


def test_the_page_allows_only_its_own_script() -> None:
    """One inline script whose sha256 is the CSP's only script source; nothing fetched from elsewhere."""
    page = view_html()
    [script] = re.findall(r"<script>(.*?)</script>", page, re.DOTALL)
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    [csp] = re.findall(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)
    assert f"script-src 'sha256-{digest}';" in csp
    assert "default-src 'none'" in csp and "connect-src 'none'" in csp and "trusted-types 'none'" in csp
    assert page.count("<script") == 1 and not re.search(r"\b(src|href)=", page)
    markup_from_strings = r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function"
    assert not re.search(markup_from_strings, script)
    # The one address is SVG's namespace, not a fetch.
    assert re.findall(r"https?://[^\s\"'`]+", page) == ["http://www.w3.org/2000/svg"]


def test_answer_view_flag_and_config_key(tmp_path: Path) -> None:
    """On by default; --no-answer-view and `answer-view = false` turn it off; flags win."""
    environ = {"XDG_CACHE_HOME": str(tmp_path)}
    config = tmp_path / "sqale.toml"
    config.write_text("demo = true\nanswer-view = false\n", encoding="utf-8")
    assert parse_settings(["--demo"], environ).answer_view is True
    assert parse_settings(["--demo", "--no-answer-view"], environ).answer_view is False
    assert parse_settings(["--config", str(config)], environ).answer_view is False
    assert parse_settings(["--config", str(config), "--answer-view"], environ).answer_view is True
    assert build_server(parse_settings(["--demo", "--no-answer-view"], environ), environ=environ) is not None


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_non_editable_install_serves_the_page(tmp_path: Path) -> None:
    """`pip install .` of a clean copy into a fresh venv, run from another folder: the page is installed."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=False,
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout: the clean copy to install is made from git's file list")
    source = tmp_path / "source"  # what a clone holds (no build/ left over from an earlier install)
    for name in filter(None, listed.stdout.decode().split("\0")):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    site_packages = next((target / "lib").glob("python3*")) / "site-packages"
    # Only this project is installed; its dependencies come from the test's environment.
    deps = next(Path(p) for p in sys.path if p.endswith("site-packages"))
    (site_packages / "deps.pth").write_text(f"{deps}\n", encoding="utf-8")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(site_packages),
            str(source),
        ],
        check=True,
        timeout=540,
        cwd=tmp_path,
    )
    probe = (
        "import mcp_server.answer.view as v, pathlib; print(pathlib.Path(v.__file__).parent); "
        "print(len(v.view_html()))"
    )
    out = subprocess.run(
        [str(target / "bin" / "python"), "-c", probe],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
        timeout=120,
    ).stdout.split()
    assert Path(out[0]).is_relative_to(target) and int(out[1]) == len(view_html())
