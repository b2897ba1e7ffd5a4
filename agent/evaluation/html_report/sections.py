"""The parts of the page for one run: headline, settings and charts (for two runs: comparison.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..summary import Summary
from . import charts
from .data import (
    DATABASE,
    GroupAccuracy,
    Run,
    ToolRounds,
    accuracy_by,
    bin_edges,
    distributions,
    gold_tables_table,
    label_groupings,
    outcome_mix,
    status_mix,
    stop_reason_mix,
    tool_rounds,
)
from .episodes import (
    esc,
    sql_block,
)
from .voting_data import asking, calibration, stopped_early

MIXES = (
    ("outcomes", "Outcome of each episode", outcome_mix),
    ("status", "How episodes produced their SQL (status)", status_mix),
    ("stop-reasons", "Why exploration stopped", stop_reason_mix),
)


def pct(value: float | None) -> str:
    """0.8125 -> 81.2%; None -> -."""
    return "-" if value is None else f"{100 * value:.1f}%"


def figure(name: str, title: str, content: str) -> str:
    """One chart in a captioned <figure>; `content` is SVG or HTML we made."""
    return (
        f'<figure class="chart" data-chart="{esc(name)}"><figcaption>{esc(title)}</figcaption>'
        f"{content}</figure>"
    )


def headline(run: Run, summary: Summary) -> str:
    """Accuracy cards, the run's settings, and the questions whose gold SQL failed."""
    acc, ep = summary.accuracy, summary.episodes
    cards = [
        (
            pct(acc.ex),
            f"execution accuracy{' (voted)' if run.samples > 1 else ''}: {acc.correct} of {acc.questions}",
        )
    ]
    if run.samples > 1:
        cards += [
            (pct(acc.single), "single-sample accuracy (mean over samples)"),
            (pct(acc.any), f"right in any of {run.samples} samples"),
        ]
    cards += [
        (f"{summary.questions.scored:,}", "questions scored"),
        (f"{summary.questions.gold_errors:,}", "gold SQL failed (not scored)"),
        (_num(ep.mean_rounds), "rounds per episode"),
        (_num(ep.mean_tool_calls), "tool calls per episode"),
        (_num(ep.mean_tokens, 0), "tokens per episode"),
        (_num(summary.timing.mean_episode_seconds, 2), "seconds per episode"),
    ]
    html = [
        '<div class="cards">',
        *(
            f'<div class="card"><div class="n">{esc(n)}</div><div class="l">{esc(label)}</div></div>'
            for n, label in cards
        ),
        "</div>",
    ]
    items = "".join(f"<div><dt>{esc(k)}</dt><dd>{esc(v)}</dd></div>" for k, v in run_settings(run).items())
    html.append(f'<dl class="settings">{items}</dl>')
    html.append(gold_failures(run))
    return "".join(html)


def run_settings(run: Run) -> dict[str, str]:
    """Model, benchmark, backend, dates and options, as recorded on the lines (values that differ joined)."""
    first = run.records[0]
    infos = [r.run for r in run.records if r.run is not None]
    out = {
        "results file": run.name,
        "benchmark": first.benchmark,
        "model": _joined(r.model for r in run.records),
        "samples per question": str(run.samples),
    }
    if not infos:
        out["run details"] = "not recorded (file written before runs recorded their settings)"
        return out
    starts = sorted({i.started for i in infos})
    resumed = f" (resumed {len(starts) - 1}×, last {starts[-1]})" if len(starts) > 1 else ""
    out["started"] = starts[0] + resumed
    out["backend"] = _joined(i.backend or "-" for i in infos)
    for key in dict.fromkeys(k for i in infos for k in i.settings):
        out[key.replace("_", " ")] = _joined(_setting_text(key, i.settings) for i in infos)
    return out


def _setting_text(key: str, settings: Mapping[str, object]) -> str:
    """A recorded setting as the page shows it: `-` when absent or unset; the runtime slots, unset,
    are the concurrency (what the run used)."""
    value = settings.get(key)
    if value is None and key == "runtime_slots" and settings.get("concurrency") is not None:
        return f"{settings['concurrency']} (the concurrency)"
    return "-" if value is None else str(value)


def _joined(values: Iterable[str]) -> str:
    return " / ".join(dict.fromkeys(values))


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def gold_failures(run: Run) -> str:
    """The questions whose gold SQL failed, reported apart from the accuracy."""
    failed = run.gold_failures
    if not failed:
        return '<p class="muted">Every gold query ran.</p>'
    rows = "".join(
        f"<tr><td>{esc(r.key)}</td><td>{esc(r.db_id)}</td><td>{esc(r.gold.status)}</td>"
        f"<td>{esc(r.gold.error or '')}</td><td>{sql_block(r.gold_sql)}</td></tr>"
        for r in failed
    )
    return (
        f'<h3>Gold SQL that failed ({len(failed)}, not scored)</h3><table class="gold-failures">'
        f"<tr><th>#</th><th>database</th><th>status</th><th>error</th><th>gold SQL</th></tr>{rows}</table>"
    )


def run_charts(run: Run) -> str:
    """Every chart of one run."""
    figures = []
    for grouping in (*label_groupings(run), DATABASE):
        groups = accuracy_by(run.records, grouping)
        if groups:
            figures.append(
                figure(
                    f"by-{grouping.name}",
                    f"Accuracy by {grouping.name}",
                    charts.accuracy_chart(groups, salt=f"{grouping.name}"),
                )
            )
    if run.samples > 1:
        figures.append(calibration_figure(run))
        figures.append(asking_figure(run))
    for name, title, mix in MIXES:
        counts = mix(run)
        if counts:
            figures.append(figure(name, title, charts.counts_chart(counts, salt=name)))
    for dist in distributions(run):
        edges = bin_edges([*dist.correct, *dist.wrong], discrete=dist.discrete)
        svg = charts.histogram_chart(dist, edges, salt=dist.name)
        figures.append(figure(dist.name, dist.unit.capitalize(), svg))
    figures.append(tools_figure(run, None))
    figures.append(gold_tables_figure(run))
    return f'<div class="grid">{"".join(figures)}</div>'


CALIBRATION_TITLE = "Accuracy by agreement: how often the answer was right when k of K samples agreed"


def calibration_figure(
    run: Run, groups: list[GroupAccuracy] | None = None, salt: str = "agreement", prefix: str = ""
) -> str:
    """The calibration chart: accuracy per agreement level, with what early stopping does to it."""
    shown = calibration(run) if groups is None else groups
    title = prefix + CALIBRATION_TITLE
    if not any(g.questions for g in shown):
        return figure(
            "calibration",
            title,
            f'<p class="muted">{esc(run.name)} ran one sample per question: nothing to agree on '
            "(run eval with --samples 5).</p>",
        )
    note = (
        "The answer is the result most samples gave; a level is how many of the K samples gave it. "
        "On your own golden questions this says how far to trust agreement on your data."
    )
    early = stopped_early(run)
    if early:
        note += (
            f" {early} of {len(run.scored)} questions stopped early once a strict majority agreed, so "
            "their level counts only the samples that finished: run eval with --no-early-stop to "
            "see how often all K agree."
        )
    return figure(
        "calibration", title, charts.accuracy_chart(shown, salt=salt) + f'<p class="muted">{esc(note)}</p>'
    )


ASKING_TITLE = "When the samples disagreed: how often the right answer was among the options a person is shown"


def asking_figure(run: Run, salt: str = "asking") -> str:
    """Beside the calibration: on the questions whose samples disagreed (where the server asks the
    person to choose), the vote's answer, the options and any sample, right how often."""
    groups = asking(run)
    if not groups[0].questions:
        return figure(
            "asking",
            ASKING_TITLE,
            f'<p class="muted">In {esc(run.name)} the samples never '
            "disagreed: no person would have been asked.</p>",
        )
    note = (
        f"{groups[0].questions} of {len(run.scored)} questions gave more than one result: the server "
        "asks a person to choose among them (at most 4 options, then None of these). Each question "
        "below lists the options it would show."
    )
    if stopped_early(run):
        note += (
            " Some questions stopped early once a strict majority agreed (the server asking a person "
            "runs every sample): run eval with --no-early-stop to count every disagreement."
        )
    chart = charts.accuracy_chart(groups, salt=salt)
    return figure("asking", ASKING_TITLE, f'{chart}<p class="muted">{esc(note)}</p>')


def tools_figure(run: Run, aligned: ToolRounds | None, salt: str = "tools", ymax: int | None = None) -> str:
    """Which tools the model called in which round (or why the chart is missing)."""
    tools = aligned or tool_rounds(run)
    if not tools.counts:
        return figure(
            "tools",
            "Tools called in each round",
            '<p class="muted">No tool call in the kept traces (the run used --trace none, '
            "or no episode ran).</p>",
        )
    return figure(
        "tools",
        f"Tools called in each round ({tools.traced:,} traced episodes)",
        charts.tool_rounds_chart(tools, salt=salt, ymax=ymax),
    )


def gold_tables_figure(run: Run) -> str:
    """The 2×2 of 'looked at every gold table' against 'correct'."""
    t = gold_tables_table(run)

    def row(label: str, right: int, wrong: int) -> str:
        return f'<tr><th>{label}</th><td class="num">{right:,}</td><td class="num">{wrong:,}</td></tr>'

    table = (
        '<table class="two"><tr><th></th><th>correct</th><th>wrong</th></tr>'
        + row("saw every gold table", t.saw_correct, t.saw_wrong)
        + row("missed a gold table", t.missed_correct, t.missed_wrong)
        + "</table>"
        '<p class="muted">Episodes that ran; a table counts as seen when a tool showed or read it.</p>'
    )
    return figure("gold-tables", "Saw every gold table against correct", table)
