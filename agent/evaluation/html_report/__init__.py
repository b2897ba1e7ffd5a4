"""The evaluation report: one self-contained HTML page for a run, or for two runs side by side.

    write_report([results.jsonl], out)            one run
    write_report([a.jsonl, b.jsonl], out)        two runs compared question by question

Layers: `data` computes every number from the records (pure; the samples' vote in
`voting_data`), `charts` draws them with matplotlib (an optional extra), `episodes` renders the
question browser, `sections` the parts of the page, `page` the document with its styles,
script and security policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ...errors import ConfigError
from .cache_reuse import cache_section
from .charts import plotting_available, require_plotting
from .comparison import comparison_charts, comparison_headline, flipped
from .data import DIFFICULTY, Run, label_groupings, load_run, pair_runs, run_summary
from .episodes import browser, esc
from .page import document
from .sections import headline, run_charts

__all__ = [
    "Run",
    "build_comparison_page",
    "build_run_page",
    "default_report_path",
    "load_run",
    "plotting_available",
    "require_plotting",
    "write_report",
]


def build_run_page(run: Run) -> str:
    """The page of one run: headline, charts, every question."""
    summary = run_summary(run)
    title = f"{summary.benchmark} · {summary.model} · {_pct(summary.accuracy.ex)} EX"
    body = (
        f"<h1>Evaluation: {esc(title)}</h1>"
        f"{headline(run, summary)}<h2>Charts</h2>{run_charts(run)}"
        f"<h2>Prompt cache reuse</h2>{cache_section(run)}"
        f"<h2>Questions</h2>{browser(run, (*label_groupings(run), DIFFICULTY)[0])}"
    )
    return document(f"{title} · {run.name}", body)


def build_comparison_page(a: Run, b: Run) -> str:
    """The page comparing two runs: both headlines, paired counts, charts side by side, flips."""
    pairing = pair_runs(a, b)
    body = (
        f"<h1>Comparison: A {esc(a.name)} · B {esc(b.name)}</h1>"
        f"{comparison_headline(a, b, pairing)}<h2>Charts</h2>{comparison_charts(a, b)}"
        f"<h2>Questions that flipped ({len(pairing.flipped)})</h2>{flipped(pairing)}"
    )
    return document(f"A {a.name} vs B {b.name}", body)


def write_report(results: Sequence[Path], out: Path) -> Path:
    """Build the page for one results file, or the comparison for two, and write it to `out`."""
    if len(results) not in (1, 2):
        raise ConfigError("give one results file for a report, or two to compare them")
    require_plotting()
    runs = [load_run(path) for path in results]
    page = build_run_page(runs[0]) if len(runs) == 1 else build_comparison_page(runs[0], runs[1])
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        out.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"{out}: cannot write the report ({exc.strerror or exc}); give another output path"
        ) from exc
    return out


def default_report_path(results: Sequence[Path]) -> Path:
    """results.jsonl -> results.html; two files -> a-vs-b.html next to the first."""
    first = results[0]
    if len(results) == 1:
        return first.with_suffix(".html")
    return first.with_name(f"{first.stem}-vs-{results[1].stem}.html")


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"
