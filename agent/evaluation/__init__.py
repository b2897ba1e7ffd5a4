"""`sqale-agent eval`: execution accuracy of the agent on Spider, BIRD and KaggleDBQA question sets."""

from __future__ import annotations

from .accuracy import MatchRule, has_top_level_order_by, results_match, vote_key
from .datasets import Benchmark, Dataset, Example, Selection, detect_format, load_dataset, select_examples
from .records import Outcome, QuestionRecord, SampleRecord, TraceKind, read_records
from .runner import BackendFactory, EvalSettings, EvaluationAborted, RunResult, evaluate
from .scoring import QueryLimits
from .summary import Summary, render_summary, summarize, write_summary

__all__ = [
    "BackendFactory",
    "Benchmark",
    "Dataset",
    "EvalSettings",
    "EvaluationAborted",
    "Example",
    "MatchRule",
    "Outcome",
    "QueryLimits",
    "QuestionRecord",
    "RunResult",
    "SampleRecord",
    "Selection",
    "Summary",
    "TraceKind",
    "detect_format",
    "evaluate",
    "has_top_level_order_by",
    "load_dataset",
    "read_records",
    "render_summary",
    "results_match",
    "select_examples",
    "summarize",
    "vote_key",
    "write_summary",
]
