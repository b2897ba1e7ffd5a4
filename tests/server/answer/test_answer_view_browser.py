"""The answer view in headless Chromium, hosted by the official ext-apps AppBridge, fed real answers.

Answers come from the server (in process, over a fake Ollama on real HTTP) through a client
that negotiated MCP Apps; the page is the server's own `ui://` resource. Screenshots go to
$SQALE_SCREENSHOTS (default: the test's tmp folder). Skips without Chromium or the npm packages.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_server.answer.door import CHOOSE_TOOL_NAME
from mcp_server.answer.view import RESULT_META_KEY, VIEW_URI, view_html
from tests.support.apps_host import AppsHost, chromium_flags, missing_tools, write_host
from tests.support.choosing import BOOKS as CHOOSING
from tests.support.choosing import OLD_BOOKS, SEED_FLAGS, disagreeing_policy
from tests.support.chromium import Chromium, find_chromium
from tests.support.mcp import BOOK_GOLD, TOOL
from tests.support.mcp_in_process import build
from tests.support.policies import (
    OraclePolicy,
    ScriptedReply,
    ScriptPolicy,
    SeedSwitchPolicy,
    assistant_reply,
    tool_call,
)
from tests.support.wire import apps_extension

pytest.importorskip("websockets", reason="the browser test needs websockets (in the dev extra)")
CHROMIUM = find_chromium()
MISSING = missing_tools()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.timeout(600),
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)"),
    pytest.mark.skipif(MISSING is not None, reason=MISSING or ""),
]

CITIES = "What is the total quantity ordered per customer city?"
BOOKS = "Show every book with all its columns."
MONTHS = "What was the revenue per month?"
GOLD = {
    **BOOK_GOLD,
    BOOKS: "SELECT * FROM books ORDER BY book_id",
    MONTHS: "SELECT strftime('%Y-%m', o.ordered_on) AS month, round(sum(i.quantity * i.unit_price), 2) "
    "AS revenue FROM orders o JOIN order_items i USING (order_id) GROUP BY month ORDER BY month",
}
ROWS_SHOWN = "[...document.querySelectorAll('tbody tr')].map(r => [...r.cells].map(c => c.textContent))"


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    """One headless Chromium for the module."""
    assert CHROMIUM is not None
    with Chromium(CHROMIUM, tmp_path_factory.mktemp("profile"), chromium_flags()) as chromium:
        yield chromium


@pytest.fixture(scope="module")
def host_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """host.html and the bundled AppBridge."""
    return write_host(tmp_path_factory.mktemp("host"))


@pytest.fixture
def host(browser: Chromium, host_page: Path):
    """The host page in the browser; no console error by the end of the test."""
    browser.errors.clear()
    yield AppsHost(browser, host_page)
    assert browser.errors == []


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where screenshots go: $SQALE_SCREENSHOTS if set, else the test's folder."""
    folder = Path(os.environ.get("SQALE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def answers(tmp_path: Path, argv: list[str], *calls: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """The view's HTML (resources/read) and each call's result as the wire JSON a host gets."""

    async def run() -> tuple[str, list[dict[str, Any]]]:
        async with Client(build(tmp_path, argv), extensions=[apps_extension()]) as client:
            tool = (await client.list_tools()).tools[0]
            assert tool.meta == {"ui": {"resourceUri": VIEW_URI}}
            html = (await client.read_resource(VIEW_URI)).contents[0].text  # type: ignore[union-attr]
            results = [
                (await client.call_tool(TOOL, arguments)).model_dump(
                    mode="json", by_alias=True, exclude_none=True
                )
                for arguments in calls
            ]
        return html, results

    return anyio.run(run)


def demo_answer(tmp_path: Path, fake_ollama: Any, question: str, *flags: str) -> tuple[str, dict[str, Any]]:
    """The view's HTML and the server's answer to `question` on the demo database (gold SQL from GOLD)."""
    fake = fake_ollama(OraclePolicy(GOLD))
    html, [result] = answers(tmp_path, ["--demo", "--ollama-host", fake.url, *flags], {"question": question})
    return html, result


def test_label_and_number_draw_bars_beside_a_sortable_filterable_table(host, tmp_path, fake_ollama, shots):
    """City totals: bars from zero, sort by either column, filter, copy the SQL, switch theme."""
    html, result = demo_answer(tmp_path, fake_ollama, CITIES)
    host.show(html, {"question": CITIES}, result)
    host.wait_view("document.querySelector('tbody tr')")
    assert host.view("document.querySelector('figure.chart').dataset.kind") == "bar"
    bars = host.view("document.querySelectorAll('.bars .bar').length")
    assert bars == len(result["structuredContent"]["rows"])
    assert host.view("document.querySelector('.badge').textContent") == "Submitted"
    assert host.view("document.querySelector('h1.question').textContent") == CITIES
    assert host.view("document.querySelector('.rows-line').textContent") == "8 rows"
    assert host.view("[...document.querySelectorAll('th')].map(t => t.className)") == ["", "num"]
    assert host.view("getComputedStyle(document.querySelector('td.num')).textAlign") == "right"
    assert host.view("document.querySelector('pre.sql').textContent") == GOLD[CITIES]
    host.screenshot(shots / "answer-view-light.png")

    host.click("th:nth-child(2) button")
    values = [row[1] for row in host.view(ROWS_SHOWN)]
    assert values == sorted(values, key=int)
    host.click("th:nth-child(2) button")
    values = [row[1] for row in host.view(ROWS_SHOWN)]
    assert values == sorted(values, key=int, reverse=True)
    assert host.view("document.querySelector('th:nth-child(2)').getAttribute('aria-sort')") == "descending"
    host.click("th:nth-child(1) button")
    cities = [row[0] for row in host.view(ROWS_SHOWN)]
    assert cities == sorted(cities)

    host.type_into("input[type=search]", "OSL")
    assert host.view(ROWS_SHOWN) == [["Oslo", "5"]]
    assert host.view("document.querySelector('.toolbar .muted').textContent") == "1 of 8 rows match"

    host.browser.send("Browser.grantPermissions", permissions=["clipboardReadWrite", "clipboardSanitizedWrite"])
    host.click("button.copy")
    assert (
        host.wait_view(
            "document.querySelector('button.copy').textContent !== 'Copy' && "
            "document.querySelector('button.copy').textContent"
        )
        == "Copied"
    )

    light = host.view("getComputedStyle(document.body).backgroundColor")
    host.host("host.theme('dark')")
    assert host.wait_view("document.documentElement.dataset.theme") == "dark"
    dark = host.view("getComputedStyle(document.body).backgroundColor")
    assert (light, dark) == ("rgb(255, 255, 255)", "rgb(31, 30, 29)")
    host.screenshot(shots / "answer-view-dark.png")
    assert max(host.host("host.sizes")) > 400  # the view told the host its height


def test_a_wide_result_has_no_chart_and_says_what_cut_it(host, tmp_path, fake_ollama, shots):
    """Six columns of books cut at --max-rows 10: no chart, '10 of 16 rows', the limit named."""
    html, result = demo_answer(tmp_path, fake_ollama, BOOKS, "--max-rows", "10")
    # The host's theme: its colours and font as the spec's CSS variables.
    styles = {"variables": {"--font-sans": "Georgia, serif", "--color-background-primary": "#fbf8f1"}}
    host.show(html, {"question": BOOKS}, result, {"theme": "light", "styles": styles})
    host.wait_view("document.querySelector('tbody tr')")
    assert host.view("getComputedStyle(document.body).fontFamily") == "Georgia, serif"
    assert host.view("getComputedStyle(document.body).backgroundColor") == "rgb(251, 248, 241)"
    assert host.view("document.querySelector('figure.chart')") is None
    assert host.view("document.querySelector('.rows-line').textContent") == "10 of 16 rows"
    assert "--max-rows" in host.view("document.querySelector('.limits').textContent")
    assert host.view("[...document.querySelectorAll('th')].map(t => t.textContent)") == [
        "book_id",
        "title",
        "author_id",
        "genre",
        "published",
        "price",
    ]
    assert host.view(ROWS_SHOWN)[0] == ["1", "A Wizard of Earthsea", "1", "fantasy", "1968", "9.99"]
    host.screenshot(shots / "answer-view-no-chart.png")


def test_dates_and_numbers_draw_a_line(host, tmp_path, fake_ollama, shots):
    """Revenue per month: a line through every month, in date order."""
    html, result = demo_answer(tmp_path, fake_ollama, MONTHS)
    host.show(html, {"question": MONTHS}, result)
    host.wait_view("document.querySelector('svg.line')")
    assert host.view("document.querySelector('figure.chart').dataset.kind") == "line"
    assert host.view("document.querySelectorAll('svg.line circle').length") == len(
        result["structuredContent"]["rows"]
    )
    host.screenshot(shots / "answer-view-line.png")


def disagreeing(sql: str) -> ScriptPolicy:
    return ScriptPolicy(
        [
            assistant_reply("look", tool_call("list_tables")),
            assistant_reply("answer", tool_call("submit_sql", sql=sql)),
        ]
    )


def test_no_ask_again_after_an_error_more_samples_cannot_fix(host, tmp_path):
    """The model runtime is unreachable: the view shows the error and offers no "Ask again with 5
    samples" (five calls to a runtime that is down fail five times); it offers it after an answer."""
    html, [down] = answers(
        tmp_path, ["--demo", "--ollama-host", "http://127.0.0.1:9"], {"question": "How many books are there?"}
    )
    assert down["structuredContent"]["stop_reason"] == "backend_unreachable"
    host.show(html, {"question": "How many books are there?"}, down)
    host.wait_view("document.querySelector('.badge')")
    assert host.view("document.querySelector('button.ask-again')") is None


def test_ask_again_with_five_samples_shows_the_agreement(host, tmp_path, fake_ollama, shots):
    """The button calls the tool with samples=5 through the host; the answer says 3 of 5 agree."""
    oracle = OraclePolicy(GOLD)
    fake = fake_ollama(
        SeedSwitchPolicy(
            {
                100: disagreeing("SELECT 12"),
                101: disagreeing("SELECT count(*) FROM authors"),
                102: oracle,
                103: oracle,
                104: oracle,
            }
        )
    )
    question = "How many books are there?"
    argv = ["--demo", "--ollama-host", fake.url, "--seed", "100", "--max-concurrent", "1"]
    html, [first, again] = answers(
        tmp_path, argv, {"question": question}, {"question": question, "database": "bookshop", "samples": 5}
    )
    host.show(html, {"question": question}, first)
    host.wait_view("document.querySelector('button.ask-again')")
    assert host.view("document.querySelector('button.save')") is None  # no save tool offered
    host.host(f"host.results[{TOOL!r}] = {json.dumps(again)}")
    host.click("button.ask-again")
    host.wait_view("document.querySelector('header.top strong')")
    assert host.host("host.calls") == [
        {"name": TOOL, "arguments": {"question": question, "database": "bookshop", "samples": 5}}
    ]
    agreement = host.view("document.querySelector('header.top strong').textContent")
    assert agreement == "3 of 5 samples agree"
    host.click("header.top button.link")
    assert host.view("document.getElementById('candidates').open") is True
    assert host.view("document.querySelectorAll('.candidate').length") == 2
    assert host.view("document.querySelector('button.ask-again')") is None
    [update] = host.host("host.contextUpdates")
    assert update["content"][0]["text"].startswith("The user asked again with 5 samples from the answer view.")
    host.screenshot(shots / "answer-view-agreement.png")


def hostile_database(path: Path) -> Path:
    markup = [
        "<script>document.title='pwned'</script>",
        "<img src=x onerror=\"document.title='pwned'\">",
        "<b>bold</b> & <i>it</i>",
        "</td></tr><tr><td>broken out",
    ]
    with contextlib.closing(sqlite3.connect(path)) as db, db:  # closed, not only committed
        db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        db.executemany("INSERT INTO notes (body) VALUES (?)", [(m,) for m in markup])
        db.execute("INSERT INTO notes (body) VALUES (NULL)")
        db.execute("INSERT INTO notes (body) VALUES (?)", ("x" * 300,))
    return path


def test_markup_in_cells_columns_and_question_stays_text(host, tmp_path, fake_ollama, shots):
    """<script>, <img onerror> and tags in rows, column names and the question are shown, never run."""
    question = "Which notes are there? <img src=y onerror=\"document.title='pwned'\"><b>now</b>"
    sql = (
        'SELECT id AS "<script>document.title=\'pwned\'</script>", body AS "<i>body</i>" FROM notes ORDER BY id'
    )
    fake = fake_ollama(OraclePolicy({question: sql}))
    html, [result] = answers(
        tmp_path,
        ["--db", f"notes={hostile_database(tmp_path / 'notes.db')}", "--ollama-host", fake.url],
        {"question": question},
    )
    host.show(html, {"question": question}, result)
    host.wait_view("document.querySelector('tbody tr')")
    assert host.view("document.querySelector('h1.question').textContent") == question
    assert host.view("[...document.querySelectorAll('th')].map(t => t.textContent)") == [
        "<script>document.title='pwned'</script>",
        "<i>body</i>",
    ]
    cells = [row[1] for row in host.view(ROWS_SHOWN)]
    assert cells[:5] == [
        "<script>document.title='pwned'</script>",
        "<img src=x onerror=\"document.title='pwned'\">",
        "<b>bold</b> & <i>it</i>",
        "</td></tr><tr><td>broken out",
        "NULL",
    ]
    assert host.view("document.querySelector('tbody tr:nth-child(5) td:nth-child(2)').className") == "null"
    assert host.view("[...document.querySelectorAll('img, b, i, script, iframe, object')].length") == 1  # ours
    assert host.view("document.title") == "sqale-mcp answer"
    assert host.view("document.querySelectorAll('tbody tr').length") == 6

    host.click("tbody tr:nth-child(6) .long")
    assert host.view("document.querySelector('tr:nth-child(6) .long').getAttribute('aria-expanded')") == "true"
    host.screenshot(shots / "answer-view-markup.png")


def test_save_button_appears_only_when_the_host_offers_the_save_tool(host, tmp_path, fake_ollama):
    """Once the result's _meta names the save tool: it proposes (the confirmation says the owner
    reviews it first), then tools/call with the contract's arguments, and the server's text shows."""
    html, result = demo_answer(tmp_path, fake_ollama, CITIES)
    meta = {**result.get("_meta", {}), RESULT_META_KEY: {"appTools": ["save_verified_answer"]}}
    offered = {**result, "_meta": meta}
    host.show(html, {"question": CITIES, "evidence": "city means the customer's city"}, offered)
    host.wait_view("document.querySelector('button.save')")
    assert host.view("document.querySelector('button.save').textContent") == "Propose as verified"
    host.host(
        "host.results.save_verified_answer = {content: [{type: 'text', text: "
        "'Proposed, awaiting review: <b>it</b>.'}]}"
    )
    host.click("button.save")
    assert host.view("document.querySelector('.confirm').textContent") == (
        "Propose this SQL as the verified answer to this question? The library's owner reviews it; no one "
        "is answered with it until they accept it.ProposeCancel"
    )
    host.click("button.save-confirm")
    notice = "document.querySelector('.notice.ok') && document.querySelector('.notice.ok').textContent"
    assert host.wait_view(notice) == "Proposed, awaiting review: <b>it</b>."
    assert host.host("host.calls") == [
        {
            "name": "save_verified_answer",
            "arguments": {
                "database": "bookshop",
                "question": CITIES,
                "sql": GOLD[CITIES],
                "evidence": "city means the customer's city",
            },
        }
    ]


def test_a_tool_error_and_a_failed_episode_are_said_plainly(host, tmp_path, fake_ollama, shots):
    """An unknown database comes as the tool's error text; a model that never answers shows Failed."""
    fake = fake_ollama(ScriptPolicy([ScriptedReply("I do not know.")] * 3))
    html, [error, failed] = answers(
        tmp_path,
        ["--demo", "--ollama-host", fake.url],
        {"question": CITIES, "database": "nowhere"},
        {"question": CITIES},
    )
    host.show(html, {"question": CITIES, "database": "nowhere"}, error)
    host.wait_view("document.querySelector('.error-text')")
    assert host.view("document.querySelector('.badge').textContent") == "Not answered"
    assert "nowhere" in host.view("document.querySelector('.error-text').textContent")
    assert host.browser.errors == []  # the next show() forgets what this page logged
    host.show(html, {"question": CITIES}, failed)
    host.wait_view("document.querySelector('.badge')")
    assert host.view("document.querySelector('.badge').textContent") == "Failed"
    assert host.view("document.querySelector('table')") is None
    assert host.view("document.querySelector('.last-reply pre').textContent") == "I do not know."
    host.screenshot(shots / "answer-view-failed.png")


def test_the_host_hears_the_views_console_errors_and_csp_violations(host, tmp_path):
    """The check 'no console error' can fail: an error and a blocked image in the frame reach the test."""
    host.show(view_html(), {"question": CITIES}, None)
    host.wait_view("document.querySelector('.spinner')")
    host.view(
        "console.error('from the view'); document.body.append(Object.assign("
        "document.createElement('img'), {src: 'http://127.0.0.1:9/x.png'})); 1"
    )
    # Each evaluation reads the events that arrived meanwhile.
    errors = host.browser.poll(
        lambda: host.view("1") and len(host.browser.errors) >= 3 and list(host.browser.errors)
    )
    assert errors[0] == "console: from the view"
    assert all("violates the following Content Security Policy directive" in e for e in errors[1:])
    host.browser.errors.clear()


def test_a_verified_answer_says_so_offers_no_save_and_asks_the_model_again(host, tmp_path, fake_ollama, shots):
    """From the library: status Verified, no Save button even with a writable library; Ask again
    asks the model (verified: false), since the library would answer the same."""
    question = "How many books are there?"
    library = tmp_path / "lib.jsonl"
    library.write_text(
        json.dumps({"question": question, "sql": GOLD[question], "database": "bookshop", "added_by": "ann"})
        + "\n",
        encoding="utf-8",
    )
    fake = fake_ollama(OraclePolicy(GOLD))
    html, [verified] = answers(
        tmp_path,
        ["--demo", "--ollama-host", fake.url, "--verified", f"bookshop={library}", "--verified-writable"],
        {"question": question},
    )
    assert verified["structuredContent"]["status"] == "verified"
    assert verified["_meta"][RESULT_META_KEY] == {"appTools": ["save_verified_answer"]}
    host.show(html, {"question": question}, verified)
    host.wait_view("document.querySelector('button.ask-again')")
    assert "Verified" in host.view("document.querySelector('header.top').textContent")
    assert host.view("document.querySelector('button.save')") is None
    assert host.view("document.querySelector('button.ask-again').textContent") == "Ask the model (5 samples)"
    assert host.view("document.querySelector('footer').textContent") == (
        "From lib.jsonl line 1, added by ann: SQL someone verified, run now on the current data; no model "
        "was asked."
    )
    host.screenshot(shots / "answer-view-verified.png")
    host.host(f"host.results[{TOOL!r}] = {json.dumps(verified)}")
    host.click("button.ask-again")
    deadline = time.monotonic() + 30
    while not host.host("host.calls.length") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host.host("host.calls") == [
        {
            "name": TOOL,
            "arguments": {"question": question, "database": "bookshop", "samples": 5, "verified": False},
        }
    ]


def test_a_models_answer_lists_the_similar_verified_ones_to_compare(host, tmp_path, fake_ollama, shots):
    """A similar question: the model's answer, Save offered, and the similar verified SQL one click away."""
    similar = "List the titles of books published before 1960."
    library = tmp_path / "lib.jsonl"
    library.write_text(
        json.dumps(
            {
                "question": "List the titles of books published after 1990.",
                "sql": "SELECT title FROM books WHERE published > 1990 ORDER BY title",
                "database": "bookshop",
            }
        )
        + "\n",
        encoding="utf-8",
    )
    fake = fake_ollama(OraclePolicy(GOLD))
    html, [result] = answers(
        tmp_path,
        ["--demo", "--ollama-host", fake.url, "--verified", f"bookshop={library}", "--verified-writable"],
        {"question": similar},
    )
    host.show(html, {"question": similar}, result)
    host.wait_view("document.getElementById('similar-verified')")
    assert host.view("document.querySelector('#similar-verified summary').textContent") == (
        "Verified answers to similar questions (1)"
    )
    assert host.view("document.querySelector('#similar-verified code').textContent") == (
        "SELECT title FROM books WHERE published > 1990 ORDER BY title"
    )
    assert host.view("document.querySelector('button.save') !== null") is True
    host.click("#similar-verified summary")
    host.screenshot(shots / "answer-view-similar-verified.png")


def test_the_samples_results_side_by_side_and_the_one_picked_becomes_the_answer(
    host, tmp_path, fake_ollama, shots
):
    """An Apps host that answers no form: the view shows both results with their lines and SQL;
    "Use this answer" calls the app-only choose_answer with the answer's token, and the picked
    result becomes the answer, the model told so."""
    fake = fake_ollama(disagreeing_policy())
    arguments = {"question": CHOOSING, "samples": 2}

    async def run() -> tuple[str, dict[str, Any], dict[str, Any]]:
        app = build(tmp_path, ["--demo", "--ollama-host", fake.url, *SEED_FLAGS])
        async with Client(app, extensions=[apps_extension()]) as client:
            html = (await client.read_resource(VIEW_URI)).contents[0].text  # type: ignore[union-attr]
            first = await client.call_tool(TOOL, arguments)
            token = (first.meta or {})[RESULT_META_KEY]["choice"]["token"]
            chosen = await client.call_tool(CHOOSE_TOOL_NAME, {"choice": token, "option": 2})
        dump = {"mode": "json", "by_alias": True, "exclude_none": True}
        return html, first.model_dump(**dump), chosen.model_dump(**dump)  # type: ignore[arg-type]

    html, first, chosen = anyio.run(run)
    token = first["_meta"][RESULT_META_KEY]["choice"]["token"]
    host.show(html, arguments, first)
    host.wait_view("document.querySelector('section.choice')")
    assert host.view("document.querySelector('section.choice h2').textContent") == (
        "The samples found 2 different answers"
    )
    assert host.view("[...document.querySelectorAll('.option p')].map(p => p.textContent)") == [
        "16 (1 row) · 1 of 2 samples · no filter published < 1960",
        "3 (1 row) · 1 of 2 samples · filter published < 1960",
    ]
    assert host.view("[...document.querySelectorAll('.option code')].map(c => c.textContent)") == [
        GOLD[CHOOSING],
        OLD_BOOKS,
    ]
    assert host.view("[...document.querySelectorAll('.option button')].map(b => b.textContent)") == [
        "Keep this answer",
        "Use this answer",
    ]
    host.screenshot(shots / "answer-view-choice.png")
    host.host(f"host.results[{CHOOSE_TOOL_NAME!r}] = {json.dumps(chosen)}")
    host.click(".option:nth-child(2) button.choose")
    strong = (
        "document.querySelector('header.top strong.ok') && "
        "document.querySelector('header.top strong.ok').textContent"
    )
    assert host.wait_view(strong) == "Chosen by the person among 2 answers (1 of 2 samples gave it)"
    assert host.host("host.calls") == [{"name": CHOOSE_TOOL_NAME, "arguments": {"choice": token, "option": 2}}]
    assert host.view("document.querySelector('.single .value').textContent") == "3"
    assert host.view("document.querySelector('section.choice')") is None
    [update] = host.host("host.contextUpdates")
    assert update["content"][0]["text"].startswith(
        "The user chose option 2 among the samples' answers in the answer view. The answer is now:"
    )
    host.screenshot(shots / "answer-view-chosen.png")
