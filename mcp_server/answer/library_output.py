"""What the verified library adds to an answer: where a verified answer came from, and the
similar verified answers listed beside a model's (the models and their text)."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from agent.text import escape_unsafe, quoted_text
from agent.verified import Provenance, provenance_text, similar_text

from .fence import neutralise_markers

VERIFIED_QUESTION_CHARS = 200  # a verified library's question, as the text quotes it


class VerifiedSource(BaseModel):
    """Where a verified answer's SQL comes from."""

    library: str = Field(description="the verified library's file name")
    line: int = Field(description="the entry's line in that file")
    question: str = Field(description="the question as the library holds it")
    added_by: str | None = Field(description="who added the entry, when the library says")
    added_at: str | None = Field(description="when it was added (ISO 8601), when the library says")
    tags: list[str] = Field(default_factory=list, description="the entry's labels")


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
    return neutralise_markers(f"{said} Pass `verified: false` for a fresh answer from the model.")


def library_lines(note: str | None, similar: Sequence[SimilarVerified]) -> list[str]:
    """Beside a model's answer: why the library's own entry was not served, and the similar
    verified questions with their SQL."""
    lines = [f"Note: {note}."] if note else []
    listed = similar_text(similar, exact="the structured result's `similar_verified`", quote=_quoted_question)
    return [*lines, listed] if listed else lines


def _quoted_question(question: str) -> str:
    """A library's question (which a user may have saved from any text), quoted on one line."""
    return neutralise_markers(quoted_text(question, VERIFIED_QUESTION_CHARS))


def _provenance(source: VerifiedSource) -> Provenance:
    def safe(text: str | None) -> str | None:
        return None if text is None else escape_unsafe(text)

    return Provenance(safe(source.library) or "", source.line, source.question, safe(source.added_by),
                      safe(source.added_at), tuple(source.tags), None)
