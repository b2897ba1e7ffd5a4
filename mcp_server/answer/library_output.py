"""What the verified library adds to an answer: where a verified answer came from, and the
similar verified answers listed beside a model's (the models and their text)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from agent.text import escape_unsafe, quoted_text
from agent.verified import BoundParam, Provenance, params_text, provenance_text, similar_text

from .fence import neutralise_markers

VERIFIED_QUESTION_CHARS = 200  # a verified library's question, as the text quotes it


class VerifiedParam(BaseModel):
    """One value a verified template's SQL was run with, and the question's text it was read from."""

    type: str = Field(description="the parameter's type: integer, number, year, month, date, value or top")
    value: int | float | str = Field(description="the value bound to the SQL's :name")
    text: str = Field(description="the question's text it was read from")


class VerifiedSource(BaseModel):
    """Where a verified answer's SQL comes from."""

    library: str = Field(description="the verified library's file name")
    line: int = Field(description="the entry's line in that file")
    question: str = Field(description="the question as the library holds it")
    added_by: str | None = Field(description="who added the entry, when the library says")
    added_at: str | None = Field(description="when it was added (ISO 8601), when the library says")
    tags: list[str] = Field(default_factory=list, description="the entry's labels")
    params: dict[str, VerifiedParam] = Field(
        default_factory=dict, description="a template entry's values read from the question, by parameter "
                                          "name (its SQL binds each as :name); empty for the same question")


class SimilarVerified(BaseModel):
    """A verified answer to a similar question, listed to compare with this answer."""

    question: str = Field(description="the verified question")
    sql: str = Field(description="its verified SQL")
    line: int = Field(description="its line in the verified library")
    added_by: str | None = None
    added_at: str | None = None


def verified_paragraph(source: VerifiedSource) -> str:
    """The verified answer's closing paragraph: where it came from, and how to get the model's."""
    said = provenance_text(_provenance(source), quote=_quoted_question)
    read = params_text(_params(source), quote=_quoted_question)
    return neutralise_markers("".join([f"{read}\n" if read else "",
                                       f"{said} Pass `verified: false` for a fresh answer from the model."]))


def library_lines(note: str | None, similar: Sequence[SimilarVerified]) -> list[str]:
    """Beside a model's answer: why the library's own entry was not served, and the similar
    verified questions with their SQL."""
    lines = [neutralise_markers(f"Note: {note}.")] if note else []  # it may quote the question
    listed = similar_text(similar, exact="the structured result's `similar_verified`", quote=_quoted_question)
    return [*lines, listed] if listed else lines


def _quoted_question(question: str) -> str:
    """A library's question (which a user may have saved from any text), quoted on one line."""
    return neutralise_markers(quoted_text(question, VERIFIED_QUESTION_CHARS))


def _provenance(source: VerifiedSource) -> Provenance:
    def safe(text: str | None) -> str | None:
        return None if text is None else escape_unsafe(text)

    return Provenance(safe(source.library) or "", source.line, source.question, safe(source.added_by),
                      safe(source.added_at), tuple(source.tags), None, _params(source))


def _params(source: VerifiedSource) -> tuple[BoundParam, ...]:
    return tuple(BoundParam(name, p.type, p.text, p.value) for name, p in source.params.items())


def source_params(params: tuple[BoundParam, ...]) -> dict[str, VerifiedParam]:
    """A verified answer's template values as `verified.params` gives them."""
    return {p.name: VerifiedParam(type=p.type, value=p.value, text=p.text) for p in params}
