"""One question against a verified library: the same-question tier, similar questions, hints.

`consult` is the one place `ask`, the server and `eval` use a library:
- the same question (matching.normalise_question), when the caller's evidence fits the entry:
  the entry's SQL runs now, through the same worker, limits and hide rules as any answer, and
  becomes an EpisodeResult with status `verified` (no model call). SQL that fails now, or
  reads hidden data, is never served: the model answers instead and the answer says why;
- otherwise, the one template the question fits (template_tier: templates.TEMPLATE_RULE), its
  SQL run the same way with the values read from the question bound to its parameters; a miss
  where a template's words fit says why, so the caller can write the value so it reads;
- up to three similar verified questions (BM25), to list beside the model's answer;
- their evidence note, for `--verified-hints`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence, Sized
from dataclasses import dataclass
from typing import Protocol

from ..episode import EpisodeResult, EpisodeSettings, EpisodeStatus, StopReason
from ..episode_text import clip
from ..sql_answer import answer_from_sql
from ..sqlite import Database
from ..text import quoted_text
from ..untrusted import SqlAuthor, sql_block
from .checks import hidden_reads
from .library import LibraryEntry, VerifiedLibrary
from .matching import HINT_ENTRIES, hint_evidence, hint_fact, same_evidence
from .template_tier import BoundParam, TemplateMiss, fit_template

QUESTION_SHOWN_CHARS = 200  # a listed question is clipped to this
SQL_SHOWN_CHARS = 2_000  # a listed SQL longer than this is clipped in the text (whole in the data)


@dataclass(frozen=True)
class Provenance:
    """Where a verified answer came from (the library's file name, never its path)."""

    library: str
    line: int
    question: str  # the question as the library holds it
    added_by: str | None
    added_at: str | None
    tags: tuple[str, ...]
    evidence: str | None
    params: tuple[BoundParam, ...] = ()  # a template's values, as read from the question and bound

    @property
    def tier(self) -> str:
        """Which tier answered: `template` (values read from the question) or `same_question`."""
        return verified_tier(self.params)


def verified_tier(params: Sized) -> str:
    """The tier a verified answer came from, by the values it bound: none, the same question."""
    return "template" if len(params) else "same_question"


def provenance_of(
    entry: LibraryEntry, library: VerifiedLibrary, params: tuple[BoundParam, ...] = ()
) -> Provenance:
    """The provenance of one library entry (and the values a template answered with)."""
    e = entry.entry
    return Provenance(
        library.path.name, entry.line, e.question, e.added_by, e.added_at, e.tags, e.evidence, params
    )


@dataclass(frozen=True)
class Consulted:
    """What the library says about one question."""

    answer: EpisodeResult | None = None  # the same-question tier's answer; None: ask the model
    provenance: Provenance | None = None  # where `answer` came from
    similar: tuple[LibraryEntry, ...] = ()  # similar verified questions (none beside a verified answer)
    library: str | None = None  # the library's file name
    # A verified entry asks this very question (or a template's words fit it) but was not served:
    # why (its SQL fails now, the caller's evidence differs from the entry's, a slot did not read).
    not_served: str | None = None
    template_miss: TemplateMiss | None = None  # why no template answered (None: one did, or none was tried)

    def hinted(self) -> tuple[LibraryEntry, ...]:
        """The similar entries the hints give the model: the first HINT_ENTRIES short enough to give
        (never a template: the model would copy its `:name` parameters)."""
        return tuple(
            e for e in self.similar if e.template is None and hint_fact(e.question, e.sql) is not None
        )[:HINT_ENTRIES]

    def hints(self) -> str | None:
        """The similar entries as an evidence note for the model (matching.hint_evidence)."""
        return hint_evidence([(e.question, e.sql) for e in self.hinted()])


async def consult(
    library: VerifiedLibrary,
    database: Database,
    question: str,
    evidence: str | None,
    *,
    settings: EpisodeSettings,
    use_exact: bool = True,
    leave_out_same: bool = False,
) -> Consulted:
    """The library's answer to `question`, or the similar entries to show beside the model's.

    `use_exact=False` (the caller's `verified: false`) never serves an entry; `leave_out_same`
    leaves an entry asking the same question out of the similar ones (eval's hints).
    """
    snapshot = await library.acurrent(database)
    name = library.path.name
    same = snapshot.exact(question) if use_exact else None
    not_served = None
    if same is not None:
        fitting = snapshot.exact(question, evidence)
        if fitting is None:
            not_served = (
                "a verified answer to this question exists, but this call's evidence differs "
                "from the evidence it was verified with, so the model answered"
            )
        else:
            answer, failure = await run_verified(fitting, question, evidence, database, settings)
            if answer is not None:
                return Consulted(answer, provenance_of(fitting, library), library=name)
            not_served = (
                f"a verified answer to this question exists, but its SQL {failure} on the "
                "current data, so the model answered; ask the library's owner to check it"
            )
    miss = None
    if same is None and use_exact and snapshot.templates:
        fit = await fit_template(snapshot.templates, database, question)
        miss = fit.miss
        if fit.entry is not None and not same_evidence(evidence, fit.entry.entry.evidence):
            not_served = (
                f"the verified template of line {fit.entry.line} answers this question, but this "
                "call's evidence differs from the evidence it was verified with, so the model "
                "answered"
            )
        elif fit.entry is not None:
            answer, failure = await run_verified(fit.entry, question, evidence, database, settings, fit.params)
            if answer is not None:
                return Consulted(answer, provenance_of(fit.entry, library, fit.params), library=name)
            not_served = (
                f"the verified template of line {fit.entry.line} answers this question, but its SQL "
                f"{failure} on the current data, so the model answered; ask the library's owner "
                "to check it"
            )
        elif fit.why is not None:
            not_served = f"{fit.why}, so the model answered; {fit.remedy}"
    similar = snapshot.similar(question, leave_out_same=leave_out_same)
    return Consulted(similar=similar, library=name, not_served=not_served, template_miss=miss)


async def run_verified(
    entry: LibraryEntry,
    question: str,
    evidence: str | None,
    database: Database,
    settings: EpisodeSettings,
    params: tuple[BoundParam, ...] = (),
) -> tuple[EpisodeResult | None, str | None]:
    """The entry's SQL run now as an answer (the episode's own result limits), a template's with
    `params` bound; or None and why not."""
    answer, result = await answer_from_sql(
        entry.sql,
        database,
        settings,
        question=question,
        evidence=evidence,
        status=EpisodeStatus.VERIFIED,
        stop_reason=StopReason.VERIFIED,
        params={p.name: p.value for p in params} if params else None,
        owner_sql=True,  # the library's text; a template's values keep it in the worker (sqlite._inline)
    )
    if not result.ok:
        return None, f"failed ({result.error or result.status.value})"
    if hidden_reads(database, result) is not None:  # the worker refuses these; never serve one
        return None, "reads data the hide rules hide"
    return answer, None


def provenance_text(p: Provenance, quote: Callable[[str], str] | None = None) -> str:
    """One paragraph saying the answer is verified, from where, and that no model wrote it."""
    shown = quote or _quoted
    who = "".join([f" by {p.added_by}" if p.added_by else "", f" on {p.added_at}" if p.added_at else ""])
    added = f", added{who}" if who else ""
    return (
        f"Verified answer: the SQL of {p.library} line {p.line} ({shown(p.question)}{added}), run now on "
        "the current data; no model was asked."
    )


def params_text(params: Sequence[BoundParam], quote: Callable[[str], str] | None = None) -> str | None:
    """The line saying which values a template's answer read from the question; None without any."""
    if not params:
        return None
    shown = quote or (lambda text: quoted_text(text, QUESTION_SHOWN_CHARS))
    values = ", ".join(
        f"{{{p.name}}} = {p.value if isinstance(p.value, int | float) else shown(str(p.value))} "
        f"(from {shown(p.text)})"
        for p in params
    )
    return f"Read from the question: {values}."


def _quoted(question: str) -> str:
    return f'"{clip(question, QUESTION_SHOWN_CHARS)}"'


class QuestionWithSql(Protocol):
    """A verified question and its SQL (a LibraryEntry, or the server's listed copy of one)."""

    @property
    def question(self) -> str: ...

    @property
    def sql(self) -> str: ...


def similar_text(
    similar: Sequence[QuestionWithSql], *, exact: str, quote: Callable[[str], str] | None = None
) -> str | None:
    """The similar verified questions with their SQL, for the caller to compare; None without any.

    Each SQL is shown as any answer's is (`sql_block`), cut past SQL_SHOWN_CHARS with a line
    saying that `exact` holds all of it.
    """
    if not similar:
        return None
    head = (
        "A verified answer exists for a similar question:"
        if len(similar) == 1
        else f"Verified answers exist for {len(similar)} similar questions:"
    )
    lines = [f"{head} (compare them with this answer; they do not replace it)"]
    for entry in similar:
        block = sql_block(entry.sql.strip(), author=SqlAuthor.LIBRARY, limit=SQL_SHOWN_CHARS, exact=exact)
        lines.append(f"- {(quote or _quoted)(entry.question)}:\n{block}")
    return "\n".join(lines)
