"""The parts of the page for two runs: both runs side by side, the paired comparison and the flipped
questions."""

from __future__ import annotations

from ..records import QuestionRecord
from . import charts
from .data import (
    DATABASE,
    Pairing,
    Run,
    accuracy_by,
    align_groups,
    align_tool_rounds,
    bin_edges,
    distributions,
    label_groupings,
    run_summary,
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
from .sections import MIXES, calibration_figure, figure, gold_tables_figure, pct, run_settings, tools_figure
from .voting_data import AGREEMENT


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
