"""The report in a real browser: headless Chromium opens it from file:// (skips without Chromium)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.evaluation.html_report import write_report
from tests.support.chromium import Chromium, find_chromium
from tests.support.report_runs import run, run_a_policy, run_b_policy, voting_policy, write_dataset

pytest.importorskip("websockets", reason="the browser test needs websockets (in the dev extra)")
CHROMIUM = find_chromium()
# A browser starts per test and draws every chart: slow on a busy machine, hence the longer limit.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.timeout(600),
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)"),
]

VISIBLE_KEYS = "[...document.querySelectorAll('details.ep')].filter(e => !e.hidden).map(e => e.dataset.key)"
# Each chart's name, how many drawn things it holds (SVG paths and texts, or table cells), its size.
CHARTS = """[...document.querySelectorAll('figure.chart')].map(f => {
  const svg = f.querySelector('svg'); const box = (svg || f).getBoundingClientRect();
  const items = svg ? svg.querySelectorAll('path, text').length : f.querySelectorAll('td').length;
  return [f.dataset.chart, items, Math.round(box.width), Math.round(box.height)];
})"""
RUN_CHARTS = [
    "by-difficulty",
    "by-database",
    "outcomes",
    "status",
    "stop-reasons",
    "rounds",
    "tool_calls",
    "tokens",
    "seconds",
    "tools",
    "gold-tables",
]


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The page of run A and the comparison of A and B."""
    root = tmp_path_factory.mktemp("report-browser")
    dataset = write_dataset(root / "set")
    a, b = run(dataset, run_a_policy(), root / "a.jsonl"), run(dataset, run_b_policy(), root / "b.jsonl")
    k3 = run(dataset, voting_policy(), root / "k3.jsonl", samples=3, early_stop=False)
    return {
        "run": write_report([a], root / "a.html"),
        "compare": write_report([a, b], root / "ab.html"),
        "voting": write_report([k3], root / "k3.html"),
    }


@pytest.fixture
def browser(tmp_path: Path):
    """A fresh headless Chromium with its own profile in the test's folder."""
    assert CHROMIUM is not None
    with Chromium(CHROMIUM, tmp_path / "profile") as chromium:
        yield chromium


def test_run_page_in_chromium(pages, browser, tmp_path):
    """No console error; every chart drawn; the filters narrow the list; an entry opens; screenshots."""
    browser.open(pages["run"].as_uri())
    charts = browser.evaluate(CHARTS)
    assert [name for name, *_ in charts] == RUN_CHARTS
    assert [name for name, items, width, height in charts if items < 4 or width < 200 or height < 40] == []
    assert browser.evaluate("document.getElementById('filters').hidden") is False
    assert browser.evaluate(VISIBLE_KEYS) == ["0", "1", "2", "3", "4"]
    browser.screenshot(tmp_path / "light.png")
    browser.screenshot(tmp_path / "dark.png", dark=True)
    assert browser.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(13, 17, 23)"

    browser.type_into("input[name=text]", "oslo")
    assert browser.evaluate(VISIBLE_KEYS) == ["1"]
    assert browser.evaluate("document.getElementById('shown').textContent") == "1"
    browser.evaluate(
        "(() => { const f = document.getElementById('filters'); f.elements.text.value = ''; "
        "f.elements.verdict.value = 'wrong'; f.elements.verdict.dispatchEvent("
        "new Event('change', {bubbles: true})); })()"
    )
    assert browser.evaluate(VISIBLE_KEYS) == ["1", "2"]

    browser.click('details.ep[data-key="1"] > summary')
    assert browser.evaluate("document.querySelector('details.ep[data-key=\"1\"]').open") is True
    assert browser.evaluate("document.querySelector('details.ep[data-key=\"1\"] tr.diff').textContent") == "Bob"
    browser.click('details.ep[data-key="1"] details.sample > summary')
    rounds = browser.evaluate("document.querySelectorAll('details.ep[data-key=\"1\"] li.round').length")
    assert rounds == 2
    browser.screenshot(tmp_path / "episode-dark.png", dark=True)
    browser.screenshot(tmp_path / "episode-light.png")
    assert browser.errors == []
    assert all(
        (tmp_path / name).stat().st_size > 10_000
        for name in ("light.png", "dark.png", "episode-dark.png", "episode-light.png")
    )


def test_run_page_without_javascript(pages, browser):
    """With scripts off the filter form stays hidden, and entries still open on a click."""
    browser.send("Emulation.setScriptExecutionDisabled", value=True)
    browser.open(pages["run"].as_uri())
    browser.send("Emulation.setScriptExecutionDisabled", value=False)  # so the test can read the page
    assert browser.evaluate("document.getElementById('filters').hidden") is True
    browser.click('details.ep[data-key="0"] > summary')
    assert browser.evaluate("document.querySelector('details.ep[data-key=\"0\"]').open") is True
    assert browser.errors == []


def test_comparison_page_in_chromium(pages, browser, tmp_path):
    """Every chart twice, no console error, a flipped question opens onto both traces."""
    browser.open(pages["compare"].as_uri())
    charts = browser.evaluate(CHARTS)
    assert [name for name, *_ in charts] == [name for name in RUN_CHARTS for _ in "ab"]
    assert [name for name, items, width, height in charts if items < 4 or width < 200 or height < 40] == []
    browser.click('details.ep[data-key="0"] > summary')
    samples = "document.querySelectorAll('details.ep[data-key=\"0\"] details.sample').length"
    assert browser.evaluate(samples) == 2
    browser.screenshot(tmp_path / "compare.png")
    assert browser.errors == []


def test_voting_page_in_chromium(pages, browser, tmp_path):
    """K = 3: the calibration chart is drawn; the agreement filter narrows; a question shows its vote."""
    browser.open(pages["voting"].as_uri())
    charts = {name: (items, width, height) for name, items, width, height in browser.evaluate(CHARTS)}
    items, width, height = charts["calibration"]
    assert items >= 4 and width >= 200 and height >= 40
    browser.evaluate(
        "(() => { const f = document.getElementById('filters'); "
        "f.elements.agreement.value = '2 of 3 agree'; f.elements.agreement.dispatchEvent("
        "new Event('change', {bubbles: true})); })()"
    )
    assert browser.evaluate(VISIBLE_KEYS) == ["0", "1"]
    browser.click('details.ep[data-key="0"] > summary')
    votes = browser.evaluate(
        '[...document.querySelectorAll(\'details.ep[data-key="0"] table.candidates '
        "tbody tr')].map(r => [r.className, r.cells[0].textContent, "
        "r.cells[3].textContent])"
    )
    assert votes == [["chosen", "2", "✓ right"], ["", "1", "✗ wrong"]]
    browser.screenshot(tmp_path / "voting-light.png")
    browser.screenshot(tmp_path / "voting-dark.png", dark=True)
    assert browser.errors == []
    assert all((tmp_path / name).stat().st_size > 10_000 for name in ("voting-light.png", "voting-dark.png"))
