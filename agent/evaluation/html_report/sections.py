"""The parts of the page: headline, charts, and for two runs the paired comparison and flipped questions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..records import QuestionRecord
from ..summary import Summary
from . import charts
from .data import (
    DATABASE,
    GroupAccuracy,
    Pairing,
    Run,
    ToolRounds,
    accuracy_by,
    align_groups,
    align_tool_rounds,
    bin_edges,
    distributions,
    gold_tables_table,
    label_groupings,
    outcome_mix,
    run_summary,
    status_mix,
    stop_reason_mix,
    tool_rounds,
)
from .episodes import (
    esc,
    gold_result,
    predicted_result,
    sample_details,
    side_by_side,
    sql_block,
    verdict,
    voted_sample,
)
from .voting_data import AGREEMENT, asking, calibration, stopped_early

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


# ---- two runs ---------------------------------------------------------------------------


def comparison_headline(a: Run, b: Run, pairing: Pairing) -> str:
    """Both runs' numbers and settings in two columns, then the paired counts."""
    sa, sb = run_summary(a).accuracy, run_summary(b).accuracy
    settings_a, settings_b = run_settings(a), run_settings(b)
    rows = [
        (
            "execution accuracy",
            f"{pct(sa.ex)} ({sa.correct}/{sa.questions})",
            f"{pct(sb.ex)} ({sb.correct}/{sb.questions})",
        )
    ]
    if a.samples > 1 or b.samples > 1:
        rows.append(("single-sample accuracy", pct(sa.single), pct(sb.single)))
    keys = dict.fromkeys([*settings_a, *settings_b])
    rows += [(k, settings_a.get(k, "-"), settings_b.get(k, "-")) for k in keys]
    table = "".join(
        f"<tr{' class=differs' if x != y else ''}><td>{esc(k)}</td><td>{esc(x)}</td><td>{esc(y)}</td></tr>"
        for k, x, y in rows
    )
    return (
        f'<table class="compare"><tr><th></th><th>A: {esc(a.name)}</th>'
        f"<th>B: {esc(b.name)}</th></tr>{table}</table>{paired_counts(pairing)}"
    )


def paired_counts(pairing: Pairing) -> str:
    """Accuracy of both runs on the shared questions, the difference, and the 2×2 of who was right."""
    n = len(pairing.pairs)
    acc_a = (pairing.both + pairing.a_only) / n if n else None
    acc_b = (pairing.both + pairing.b_only) / n if n else None
    diff = "-" if pairing.difference is None else f"{100 * pairing.difference:+.1f}"
    cards = [
        (f"{pct(acc_a)} → {pct(acc_b)}", "A → B on the same questions"),
        (diff, "points, B − A"),
        (f"{pairing.p_value:.3g}", f"exact McNemar p ({pairing.a_only + pairing.b_only} flipped)"),
    ]
    html = [
        f"<h2>Paired: the {n:,} questions scored in both</h2>",
        '<div class="cards">',
        *(
            f'<div class="card"><div class="n">{esc(v)}</div><div class="l">{esc(label)}</div></div>'
            for v, label in cards
        ),
        "</div>",
        '<table class="two paired"><tr><th></th><th>right in B</th><th>wrong in B</th></tr>',
        f'<tr><th>right in A</th><td class="num">{pairing.both:,} both</td>'
        f'<td class="num">{pairing.a_only:,} A only</td></tr>',
        f'<tr><th>wrong in A</th><td class="num">{pairing.b_only:,} B only</td>'
        f'<td class="num">{pairing.neither:,} neither</td></tr></table>',
    ]
    if pairing.only_a or pairing.only_b:
        html.append(
            f'<p class="muted">Not paired: {pairing.only_a} scored questions only in A, '
            f"{pairing.only_b} only in B.</p>"
        )
    return "".join(html)


def comparison_charts(a: Run, b: Run) -> str:
    """Each chart for A and for B side by side, on shared axes."""
    rows = []
    labelled = dict.fromkeys([*label_groupings(a), *label_groupings(b)])
    for grouping in (*labelled, DATABASE):
        ga, gb = align_groups(accuracy_by(a.records, grouping), accuracy_by(b.records, grouping))
        if ga:
            rows.append(
                _pair(
                    f"by-{grouping.name}",
                    f"Accuracy by {grouping.name}",
                    charts.accuracy_chart(ga, salt=f"a-{grouping.name}"),
                    charts.accuracy_chart(gb, salt=f"b-{grouping.name}"),
                )
            )
    if a.samples > 1 or b.samples > 1:
        ga, gb = align_groups(accuracy_by(a.records, AGREEMENT), accuracy_by(b.records, AGREEMENT))
        rows.append(
            f'<div class="pair">{calibration_figure(a, ga, "a-agreement", "A · ")}'
            f"{calibration_figure(b, gb, 'b-agreement', 'B · ')}</div>"
        )
    for name, title, mix in MIXES:
        ca, cb = mix(a), mix(b)
        top = max([*ca.values(), *cb.values(), 0])
        rows.append(
            _pair(
                name,
                title,
                charts.counts_chart(ca, salt=f"a-{name}", xmax=top),
                charts.counts_chart(cb, salt=f"b-{name}", xmax=top),
            )
        )
    for da, db in zip(distributions(a), distributions(b), strict=True):
        edges = bin_edges([*da.correct, *da.wrong, *db.correct, *db.wrong], discrete=da.discrete)
        top = charts.tallest_bin([da, db], edges)
        rows.append(
            _pair(
                da.name,
                da.unit.capitalize(),
                charts.histogram_chart(da, edges, salt=f"a-{da.name}", ymax=top),
                charts.histogram_chart(db, edges, salt=f"b-{da.name}", ymax=top),
            )
        )
    ta, tb = align_tool_rounds(tool_rounds(a), tool_rounds(b))
    top = max(
        [sum(n for (r, _), n in t.counts.items() if r == rr) for t in (ta, tb) for rr in t.rounds], default=0
    )
    rows.append(
        f'<div class="pair">{tools_figure(a, ta, "a-tools", top)}{tools_figure(b, tb, "b-tools", top)}</div>'
    )
    rows.append(f'<div class="pair">{gold_tables_figure(a)}{gold_tables_figure(b)}</div>')
    return "".join(rows)


def _pair(name: str, title: str, svg_a: str, svg_b: str) -> str:
    return f'<div class="pair">{figure(name, f"A · {title}", svg_a)}{figure(name, f"B · {title}", svg_b)}</div>'


def flipped(pairing: Pairing) -> str:
    """The questions right in one run only, each opening both answers and both traces."""
    out = []
    for label, right_in_a in (("Right in A only", True), ("Right in B only", False)):
        chosen = [(x, y) for x, y in pairing.flipped if bool(x.correct) == right_in_a]
        items = "".join(_flip_entry(x, y) for x, y in chosen)
        listing = f'<div class="episodes flipped">{items}</div>' if chosen else '<p class="muted">none</p>'
        out.append(f"<h3>{label} ({len(chosen)})</h3>{listing}")
    return "".join(out)


def _flip_entry(a: QuestionRecord, b: QuestionRecord) -> str:
    def mark(record: QuestionRecord) -> str:
        return "✓" if record.correct else "✗"

    summary = (
        f'<summary><span class="key">{esc(a.key)}</span><span class="v {verdict(a)}">A {mark(a)}</span>'
        f'<span class="v {verdict(b)}">B {mark(b)}</span><span>{esc(a.db_id)}</span>'
        f"<span>{esc(a.status or '')} → {esc(b.status or '')}</span>"
        f'<span class="q">{esc(a.question)}</span></summary>'
    )
    va, vb = voted_sample(a), voted_sample(b)
    body = [
        f'<p class="question">{esc(a.question)}</p>',
        side_by_side(
            ("A: predicted SQL", sql_block(a.predicted_sql)),
            ("B: predicted SQL", sql_block(b.predicted_sql)),
            ("gold SQL", sql_block(a.gold_sql)),
        ),
        side_by_side(
            ("A: predicted result", predicted_result(a, va)),
            ("B: predicted result", predicted_result(b, vb)),
            ("gold result", gold_result(a, None)),
        ),
    ]
    body += [sample_details(a, s, voted=s is va, run="A · ") for s in a.samples]
    body += [sample_details(b, s, voted=s is vb, run="B · ") for s in b.samples]
    return (
        f'<details class="ep flip" data-key="{esc(a.key)}">{summary}'
        f'<div class="ep-body">{"".join(body)}</div></details>'
    )
