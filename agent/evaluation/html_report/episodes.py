"""The episode browser: one collapsible entry per question with its SQL, results and trace.

Everything from a results file is untrusted text (questions, SQL, cells, the model's output,
tool results): every value goes through `esc` on its way into the page. `<details>` elements
open and close without JavaScript; only the filter form needs it.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Sequence

from ...text import plural
from ..records import QuestionRecord, RoundTrace, RowsPreview, SampleRecord
from ..scoring import MATCH_RULES, MatchRule
from ..summary import agreement_level, agreement_rank
from .data import Grouping, Run, unmatched_rows
from .voting_data import candidates

GOLD_ERROR = "gold error"


def esc(value: object) -> str:
    """Text made safe for HTML content and quoted attributes."""
    return html.escape(str(value), quote=True)


def verdict(record: QuestionRecord) -> str:
    """correct / wrong / gold error: what the browser's first filter selects on."""
    if record.gold_error:
        return GOLD_ERROR
    return "correct" if record.correct else "wrong"


def status_of(record: QuestionRecord) -> str:
    """The voted sample's status, or `gold error` when nothing was scored."""
    return record.status or GOLD_ERROR


def browser(run: Run, grouping: Grouping) -> str:
    """The filter form (shown by the script) and every question of the run."""
    records = run.records
    facets = {
        "verdict": sorted({verdict(r) for r in records}),
        "group": sorted(
            {label for r in records for label in grouping.labels_of(r)},
            key=grouping.rank or (lambda label: (0, label)),
        ),
        "db": sorted({r.db_id for r in records}),
        "status": sorted({status_of(r) for r in records}),
        "agreement": sorted({level for r in records if (level := agreement_level(r))}, key=agreement_rank),
    }
    names = {
        "verdict": "verdict",
        "group": grouping.name,
        "db": "database",
        "status": "status",
        "agreement": "agreement",
    }
    selects = "".join(
        f'<label>{esc(names[key])} <select name="{key}"><option value="">all</option>'
        + "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in values)
        + "</select></label>"
        for key, values in facets.items()
        if values
    )
    form = (
        f'<form id="filters" class="filters" hidden>{selects}'
        '<label class="grow">text <input type="search" name="text" '
        'placeholder="question, SQL or database"></label>'
        f'<span class="shown"><b id="shown">{len(records)}</b> of {len(records)} shown</span></form>'
    )
    head = (
        f'<div class="ep-head"><span>#</span><span></span><span>{esc(grouping.name)}</span>'
        "<span>database</span><span>status</span><span>question</span></div>"
    )
    items = "".join(question_entry(r, grouping) for r in records)
    return f'{form}<div class="episodes" id="episodes">{head}{items}</div>'


def question_entry(record: QuestionRecord, grouping: Grouping) -> str:
    """One question as a <details>: a summary row that opens onto SQL, results and traces."""
    v = verdict(record)
    mark = {"correct": "✓", "wrong": "✗"}.get(v, "–")
    groups = grouping.labels_of(record)
    level = agreement_level(record)
    attrs = (
        f'data-key="{esc(record.key)}" data-verdict="{esc(v)}" data-group="{esc(chr(10).join(groups))}" '
        f'data-db="{esc(record.db_id)}" data-status="{esc(status_of(record))}" '
        f'data-agreement="{esc(level or "")}"'
    )
    status = status_of(record) + (f" · {_votes_short(record)}" if level else "")
    summary = (
        f'<summary><span class="key">{esc(record.key)}</span>'
        f'<span class="v {v.replace(" ", "-")}" title="{esc(v)}">{mark}</span>'
        f"<span>{esc(', '.join(groups))}</span><span>{esc(record.db_id)}</span>"
        f'<span title="{esc(level or "")}">{esc(status)}</span>'
        f'<span class="q">{esc(record.question)}</span></summary>'
    )
    return f'<details class="ep" {attrs}>{summary}<div class="ep-body">{question_body(record)}</div></details>'


def question_body(record: QuestionRecord) -> str:
    """Question, SQL side by side, results side by side, then each sample's trace."""
    parts = [f'<p class="question">{esc(record.question)}</p>']
    if record.evidence:
        parts.append(f'<p class="evidence"><b>evidence</b> {esc(record.evidence)}</p>')
    if record.gold_error:
        parts.append(
            f'<p class="bad">The gold SQL failed ({esc(record.gold.status)}): '
            f"{esc(record.gold.error or 'no message')}. This question is not scored.</p>"
        )
        return "".join(parts) + side_by_side(("gold SQL", sql_block(record.gold_sql)))
    voted = voted_sample(record)
    parts.append(
        side_by_side(
            ("predicted SQL", sql_block(record.predicted_sql)), ("gold SQL", sql_block(record.gold_sql))
        )
    )
    parts.append(results_side_by_side(record, voted))
    if len(record.samples) > 1:
        parts.append(vote_section(record))
    parts += [sample_details(record, s, voted=s is voted) for s in record.samples]
    return "".join(parts)


def _votes_short(record: QuestionRecord) -> str:
    """`3/5` agree, or `no SQL` when the answer has none."""
    if record.agreement is None:
        return "no SQL"
    k = len(record.samples)
    return f"{round(record.agreement * k)}/{k}"


def vote_section(record: QuestionRecord) -> str:
    """How the K samples voted: the agreement, then each distinct result with its votes and SQL."""
    level = agreement_level(record) or ""
    share = "" if record.agreement is None else f" (agreement {record.agreement:.2f})"
    head = f"<h4>vote: {esc(level)}{esc(share)}</h4>"
    if record.stopped_early:
        head += '<p class="muted">The other samples were stopped once a strict majority agreed.</p>'
    shown = candidates(record)
    if not shown:
        counts = ", ".join(str(n) for n in record.vote_counts) or "none"
        return (
            f'<section class="vote">{head}<p class="muted">votes per result: {esc(counts)} (this results '
            "file does not record which sample gave which result)</p></section>"
        )
    rows = "".join(
        f'<tr{" class=chosen" if c.chosen else ""}><td class="num">{c.votes}</td>'
        f"<td>{esc(', '.join(str(i) for i in c.samples))}</td>"
        f'<td class="num">{"-" if c.rows is None else f"{c.rows:,}"}</td>'
        f'<td class="v {"correct" if c.correct else "wrong"}">{"✓ right" if c.correct else "✗ wrong"}</td>'
        f"<td>{'answer' if c.chosen else ''}</td><td>{sql_block(c.sql)}</td></tr>"
        for c in shown
    )
    abstained = len(record.samples) - sum(c.votes for c in shown)
    note = (
        (
            f'<p class="muted">{plural(abstained, "sample")} gave no result that could vote (no SQL, an '
            "error, too many rows, or stopped early).</p>"
        )
        if abstained
        else ""
    )
    return (
        f'<section class="vote">{head}<table class="candidates"><thead><tr><th>votes</th><th>samples</th>'
        "<th>rows</th><th>verdict</th><th></th><th>SQL</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>{note}{choice_part(record)}</section>"
    )


def choice_part(record: QuestionRecord) -> str:
    """The options a person would have been asked to choose among, the right one marked."""
    choice = record.choice
    if choice is None:
        return ""
    items = "".join(
        f"<li{' class=right' if k == choice.right else ''}>{esc(label)}"
        f"{' <strong>✓ right</strong>' if k == choice.right else ''}</li>"
        for k, label in enumerate(choice.options, start=1)
    )
    more = f"<li class=muted>({plural(choice.more, 'other result')} not shown)</li>" if choice.more else ""
    said = "none of them is right" if choice.right is None else f"option {choice.right} is right"
    return (
        f'<div class="choice"><h4>a person would be asked ({esc(said)})</h4><ol>{items}{more}'
        "<li>None of these</li></ol></div>"
    )


def voted_sample(record: QuestionRecord) -> SampleRecord | None:
    """The sample whose answer counts for the question."""
    return next((s for s in record.samples if s.sample == record.voted_sample), None)


def side_by_side(*columns: tuple[str, str]) -> str:
    """Columns with a heading each, side by side on a wide screen."""
    cells = "".join(f"<section><h4>{esc(title)}</h4>{body}</section>" for title, body in columns)
    return f'<div class="cols">{cells}</div>'


def sql_block(sql: str | None) -> str:
    """The SQL in a <pre>, or a note that there is none."""
    if sql is None:
        return '<p class="muted">no SQL</p>'
    return f'<pre class="sql">{esc(sql.strip())}</pre>'


def results_side_by_side(record: QuestionRecord, sample: SampleRecord | None) -> str:
    """The predicted and the gold result's first rows, rows missing from the other side marked."""
    return side_by_side(
        ("predicted result", predicted_result(record, sample)), ("gold result", gold_result(record, sample))
    )


def predicted_result(record: QuestionRecord, sample: SampleRecord | None) -> str:
    """A sample's first rows (rows the gold lacks marked when it was wrong), or why there are none."""
    if sample is None:
        return '<p class="muted">no sample ran</p>'
    predicted, gold = sample.preview, record.gold.preview
    if predicted is None:
        why = sample.error or ("no SQL" if sample.sql is None else "rows not recorded")
        return f'<p class="bad">{esc(sample.outcome.value)}: {esc(why)}</p>'
    marks = None
    if gold is not None and not sample.correct:
        marks = unmatched_rows(
            predicted,
            gold,
            ordered=record.gold.ordered,
            any_column_order=_match_rule(record.benchmark) is MatchRule.MULTISET,
        )
    return rows_table(predicted, sample.result_rows or 0, marks)


def gold_result(record: QuestionRecord, against: SampleRecord | None) -> str:
    """The gold first rows; with a wrong `against` sample, the rows it lacks are marked."""
    gold = record.gold.preview
    if gold is None:
        return '<p class="muted">rows not recorded (results file written before the report existed)</p>'
    marks = None
    if against is not None and against.preview is not None and not against.correct:
        marks = unmatched_rows(
            gold,
            against.preview,
            ordered=record.gold.ordered,
            any_column_order=_match_rule(record.benchmark) is MatchRule.MULTISET,
        )
    return rows_table(gold, record.gold.rows, marks)


def _match_rule(benchmark: str) -> MatchRule:
    return next((rule for bench, rule in MATCH_RULES.items() if bench.value == benchmark), MatchRule.MULTISET)


def rows_table(preview: RowsPreview, total: int, marks: Sequence[bool] | None) -> str:
    """The preview rows as a table; marked rows have no counterpart in the other result."""
    head = "".join(f"<th>{esc(c)}</th>" for c in preview.columns)
    body = "".join(
        f"<tr{' class=diff' if marks and marks[i] else ''}>"
        + "".join(f"<td>{_cell(v)}</td>" for v in row)
        + "</tr>"
        for i, row in enumerate(preview.rows)
    )
    shown = len(preview.rows)
    note = plural(total, "row") + (f", first {shown} shown" if shown < total else "")
    if marks and any(marks):
        note += f"; marked ({sum(marks)}): not among the other result's rows shown"
    return (
        f'<table class="rows"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
        f'<p class="rows-note">{esc(note)}</p>'
    )


def _cell(value: object) -> str:
    if value is None:
        return '<span class="null">NULL</span>'
    return esc(value)


def sample_details(record: QuestionRecord, sample: SampleRecord, *, voted: bool, run: str = "") -> str:
    """One sampled episode: its numbers in the summary, its SQL (when several) and trace inside."""
    head = [
        f"{run}sample {sample.sample}" + (" (voted)" if voted and len(record.samples) > 1 else ""),
        sample.outcome.value,
        sample.status,
        sample.stop_reason or "-",
        f"{sample.rounds} rounds",
        f"{sample.tool_calls} calls",
        f"{sample.tokens:,} tokens",
        f"{sample.seconds:.1f} s",
    ]
    if sample.saw_gold_tables is False:
        head.append("missed a gold table")
    body = [sql_block(sample.sql)] if len(record.samples) > 1 else []
    if sample.error:
        body.append(f'<p class="bad">{esc(sample.error)}</p>')
    body.append(trace_html(sample.trace))
    return f'<details class="sample"><summary>{esc(" · ".join(head))}</summary>{"".join(body)}</details>'


def trace_html(trace: Iterable[RoundTrace] | None) -> str:
    """Each round: the model's completion as it wrote it, then every call with the text it got back."""
    if trace is None:
        return '<p class="muted">no trace kept (the run used --trace none, or the episode did not run)</p>'
    rounds = []
    for played in trace:
        label = "final turn" if played.final else f"round {played.index}"
        cached = "unknown" if played.cached_tokens is None else f"{played.cached_tokens:,}"
        head = (
            f"{label} · {played.prompt_tokens:,}+{played.completion_tokens:,} tokens "
            f"({cached} from cache) · model "
            f"{played.model_seconds:.2f} s · tools {played.tool_seconds:.3f} s · {played.finish_reason}"
        )
        parts = [
            f'<div class="round-head">{esc(head)}</div>',
            f'<pre class="completion">{esc(played.completion)}</pre>',
        ]
        for call in played.calls:
            flags = ("" if call.ok else " [error]") + (" [duplicate, not run again]" if call.duplicate else "")
            args = json.dumps(call.args, ensure_ascii=False)
            result = (
                f'<pre class="result">{esc(call.text)}</pre>'
                if call.text is not None
                else '<p class="muted">result text not kept (--trace calls)</p>'
            )
            parts.append(
                f'<div class="call{"" if call.ok else " err"}"><div class="call-head">→ '
                f"{esc(call.tool)} {esc(args)}{esc(flags)}</div>{result}</div>"
            )
        parts += [f'<p class="note">note: {esc(note)}</p>' for note in played.notes]
        rounds.append(f'<li class="round">{"".join(parts)}</li>')
    return f'<ol class="trace">{"".join(rounds)}</ol>'
