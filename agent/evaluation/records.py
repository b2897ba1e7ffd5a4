"""The results file: one JSON line per question, written as it goes and read back on --resume."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..episode import EpisodeResult
from ..episode_text import JsonCell, json_cell
from ..errors import ConfigError
from ..jsonl import complete_lines, dumps_line
from ..sqlite import QueryResult


class Outcome(StrEnum):
    """What became of one sampled answer; everything except CORRECT counts as wrong."""

    CORRECT = "correct"
    WRONG_RESULT = "wrong_result"  # ran, but the rows differ from the gold rows
    NO_SQL = "no_sql"  # the episode produced no runnable SQL
    SQL_ERROR = "sql_error"
    DENIED = "denied"
    TIMEOUT = "timeout"
    KILLED = "killed"
    ROW_CAP = "row_cap"  # more rows than the comparison cap: not compared
    BACKEND_UNREACHABLE = "backend_unreachable"
    BACKEND_TIMEOUT = "backend_timeout"
    MODEL_NOT_FOUND = "model_not_found"
    BACKEND_AUTH = "backend_auth"
    BACKEND_RESPONSE = "backend_response"
    BACKEND_ERROR = "backend_error"  # another BackendError subclass
    CANCELLED = "cancelled"  # stopped early: a strict majority of the samples already agreed

    @property
    def is_backend(self) -> bool:
        """True for failures of the model runtime rather than of the model."""
        return self.value.startswith(("backend_", "model_not_found"))


BACKEND_ERROR_STATUS = "backend_error"  # episode status of a sample whose backend failed
CANCELLED_STATUS = "cancelled"  # episode status of a sample stopped by the early stop


class TraceKind(StrEnum):
    """How much of each episode the results file keeps."""

    FULL = "full"  # completions and every tool result text
    CALLS = "calls"  # completions and calls, without the tool result texts
    NONE = "none"


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# The first rows of each result are kept so the HTML report can show gold and predicted side by side.
PREVIEW_ROWS = 10
PREVIEW_CELL_CHARS = 200


class RowsPreview(_Record):
    """The first rows of a result as JSON-safe cells, long text clipped."""

    columns: list[str]
    rows: list[list[JsonCell]]


class RunInfo(_Record):
    """How the run that wrote a line was set up: when, against which backend, with which options."""

    started: str  # ISO 8601 time (UTC) the run, or its --resume, started
    backend: str | None = None  # "ollama" or "openai"
    settings: dict[str, str | int | float | bool | None] = Field(default_factory=dict)


class CallTrace(_Record):
    tool: str
    args: dict[str, Any]
    ok: bool
    duplicate: bool
    seconds: float
    tables: list[str]
    text: str | None  # None with --trace calls


class RoundTrace(_Record):
    index: int
    final: bool
    completion: str
    calls: list[CallTrace]
    notes: list[str]
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    model_seconds: float
    tool_seconds: float
    # Prompt tokens the engine served from its cache; None: it did not say (or an older file).
    cached_tokens: int | None = None
    replica: str | None = None  # the engine (replica) that answered, when the backend named it


class GoldRecord(_Record):
    """How the gold SQL ran."""

    status: str  # a QueryStatus value, or "row_cap"
    error: str | None
    rows: int
    ordered: bool  # the comparison respects row order (Spider rule with a top-level ORDER BY)
    tables: list[str]  # schema tables the gold query reads
    seconds: float
    preview: RowsPreview | None = None  # absent in files written before the HTML report


class SampleRecord(_Record):
    """One episode and how its answer compared with the gold result."""

    sample: int
    seed: int | None
    sql: str | None
    status: str  # an EpisodeStatus value, or "backend_error"
    stop_reason: str | None
    outcome: Outcome
    correct: bool
    error: str | None
    result_rows: int | None
    rounds: int
    tool_calls: int
    tokens: int
    seconds: float
    model_seconds: float
    tool_seconds: float
    tables_seen: list[str]
    saw_gold_tables: bool | None  # None when the episode did not run
    trace: list[RoundTrace] | None
    preview: RowsPreview | None = None  # the predicted result's first rows, when it ran


class ChoiceRecord(_Record):
    """What a person would have been asked when the samples disagreed (agent.choices: the server's
    form), and which option was right."""

    options: list[str]  # each option's line as the form shows it ("None of these" follows them)
    groups: list[int]  # the `vote_groups` entry each option shows, in order
    right: int | None  # the 1-based number of the option whose result is right; None: none is
    more: int = 0  # results not offered (past agent.choices.MAX_OPTIONS), right or not


class QuestionRecord(_Record):
    """One line of results.jsonl. Answer fields describe the voted sample."""

    key: str
    index: int
    benchmark: str
    model: str
    db_id: str
    difficulty: str | None
    tags: list[str] = []  # a golden question's labels (summaries group by them)
    question: str
    evidence: str | None
    gold_sql: str
    gold: GoldRecord
    gold_error: bool  # the gold SQL failed: not scored
    predicted_sql: str | None
    status: str | None
    correct: bool | None  # the voted answer; None when gold_error
    single_correct: float | None  # share of the samples that ran to the end that were correct
    any_correct: bool | None
    voted_sample: int | None  # the answer's sample (agent.sampling's choice, with or without a vote)
    vote_counts: list[int]  # size of each result group, largest first
    # The samples of each result group (sample indexes), in vote_counts' order; absent in files
    # written before the report showed candidates.
    vote_groups: list[list[int]] = []
    # Share of the K samples agreeing with the voted answer (agent.sampling); None when that answer
    # has no SQL that ran, or the line was written before this field.
    agreement: float | None = None
    stopped_early: bool = False  # a strict majority agreed before every sample finished
    rounds: int
    tool_calls: int
    tokens: int  # all samples
    seconds: float  # wall time of the whole question
    samples: list[SampleRecord]
    run: RunInfo | None = None  # absent in files written before the HTML report
    # The verified questions whose SQL went to the model as evidence (eval --verified-hints).
    verified_hints: list[str] = []
    # When the samples' results disagreed: the options a person would have been asked to choose
    # among, and which was right (absent otherwise, and in files written before it).
    choice: ChoiceRecord | None = None

    @property
    def backend_failed(self) -> bool:
        """True when a sample failed because of the model runtime (--resume retries these)."""
        return any(s.outcome.is_backend for s in self.samples)


def preview_of(result: QueryResult) -> RowsPreview | None:
    """The first rows of a query that ran, for the report; None when it failed."""
    if not result.ok:
        return None
    rows = [[_preview_cell(v) for v in row] for row in result.rows[:PREVIEW_ROWS]]
    return RowsPreview(columns=list(result.columns), rows=rows)


def _preview_cell(value: object) -> JsonCell:
    cell = json_cell(value)
    if isinstance(cell, str) and len(cell) > PREVIEW_CELL_CHARS:
        return f"{cell[:PREVIEW_CELL_CHARS]}…[{len(cell):,} chars]"
    return cell


def trace_of(result: EpisodeResult, kind: TraceKind) -> list[RoundTrace] | None:
    """The rounds of an episode as kept in the results file."""
    if kind == TraceKind.NONE:
        return None
    return [
        RoundTrace(
            index=r.index,
            final=r.final,
            completion=r.completion,
            calls=[
                CallTrace(
                    tool=c.call.tool,
                    args=dict(c.call.args),
                    ok=c.ok,
                    duplicate=c.duplicate,
                    seconds=c.seconds,
                    tables=sorted(c.tables),
                    text=c.text if kind == TraceKind.FULL else None,
                )
                for c in r.calls
            ],
            notes=list(r.notes),
            prompt_tokens=r.prompt_tokens,
            completion_tokens=r.completion_tokens,
            finish_reason=r.finish_reason,
            model_seconds=r.model_seconds,
            tool_seconds=r.tool_seconds,
            cached_tokens=r.cached_tokens,
            replica=r.replica,
        )
        for r in result.rounds
    ]


def without_trace(record: QuestionRecord) -> QuestionRecord:
    """The record with its samples' traces dropped (what a run keeps in memory for the summary)."""
    if all(s.trace is None for s in record.samples):
        return record
    return record.model_copy(update={"samples": [s.model_copy(update={"trace": None}) for s in record.samples]})


def to_line(record: QuestionRecord) -> str:
    """One JSON line, newline included; non-JSON values in tool args become strings."""
    return dumps_line(record.model_dump(mode="json"), default=str)


def read_records(path: Path, *, traces: bool = False) -> dict[str, QuestionRecord]:
    """Records by key, the last line of a key winning; a torn last line is ignored.

    Traces are dropped unless `traces` is set: a long run's traces do not fit in memory.
    """
    records: dict[str, QuestionRecord] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return records
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror}); check the --out path") from exc
    # Whatever follows the last newline was cut off mid-write.
    for number, line in complete_lines(text):
        if not line.strip():
            continue
        try:
            record = QuestionRecord.model_validate_json(line)
        except ValidationError as exc:
            raise ConfigError(
                f"{path}: line {number} is not a result record of this tool "
                f"({describe_mismatch(exc)}); give another --out"
            ) from exc
        records[record.key] = record if traces else without_trace(record)
    return records


def describe_mismatch(exc: ValidationError, *, shown: int = 3) -> str:
    """What is wrong with a line, the same whatever order pydantic lists its errors in.

    Unknown fields first, then missing ones, then wrong values; names sorted within each group.
    """
    unknown: set[str] = set()
    missing: set[str] = set()
    invalid: dict[str, str] = {}
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "the line"
        if error["type"] == "extra_forbidden":
            unknown.add(where)
        elif error["type"] == "missing":
            missing.add(where)
        else:
            invalid.setdefault(where, str(error["msg"]))
    parts = []
    for label, names in (("unknown field", sorted(unknown)), ("missing field", sorted(missing))):
        if names:
            more = f" and {len(names) - shown} more" if len(names) > shown else ""
            listed = ", ".join(names[:shown]) + more
            parts.append(f"{label}{'s' if len(names) > 1 else ''} {listed}")
    for where in sorted(invalid)[:shown]:
        parts.append(f"{where}: {invalid[where]}")
    if len(invalid) > shown:
        parts.append(f"{len(invalid) - shown} more wrong values")
    return "; ".join(parts)


def drop_torn_tail(path: Path) -> None:
    """Cut a partial last line (a run killed mid-write) so appended lines start clean."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    if data and not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
        with path.open("r+b") as fh:
            fh.truncate(keep)


def check_compatible(
    records: Iterable[QuestionRecord], *, benchmark: str, model: str, samples: int, path: Path
) -> None:
    """Refuse to resume a file written for another benchmark, model or sample count."""
    for record in records:
        theirs = (record.benchmark, record.model, len(record.samples))
        if record.gold_error:
            theirs = (record.benchmark, record.model, samples)
        if theirs != (benchmark, model, samples):
            raise ConfigError(
                f"{path}: its line for question {record.key} was written with benchmark "
                f"{record.benchmark}, model {record.model}, {len(record.samples)} samples; this run "
                f"uses {benchmark}, {model}, {samples}; give another --out or the same options"
            )
