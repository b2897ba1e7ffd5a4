"""The verified library on the server: consulted before the model, shown beside its answer.

A question whose database has a library is looked up there first (agent.verified.consult):
the same question is answered at once with the library's SQL run now (no model call, no
runtime slot); otherwise the similar verified questions are listed beside the model's answer
and, with --verified-hints, given to the model as evidence.
"""

from __future__ import annotations

from dataclasses import replace

from agent.notes import FACT_SEPARATOR
from agent.verified import Consulted, consult

from ..state import ServerState
from .output import AnswerOutput, SimilarVerified, VerifiedSource, answer_from_episode, source_params
from .sampling import QuestionCall

VERIFIED_MODEL = "verified library"  # the `model` of a verified answer: no model wrote its SQL


async def consult_library(server_state: ServerState, call: QuestionCall) -> Consulted | None:
    """What the database's verified library says about the call; None when it has no library."""
    library = server_state.verified.get(call.alias)
    if library is None:
        return None
    return await consult(library, server_state.databases[call.alias], call.question, call.given_evidence,
                         settings=server_state.episode_settings, use_exact=call.use_verified)


def verified_answer(consulted: Consulted, alias: str, max_rows: int) -> AnswerOutput:
    """The structured answer of the same-question tier: the shape of any answer, status verified."""
    assert consulted.answer is not None and consulted.provenance is not None
    p = consulted.provenance
    answer = answer_from_episode(consulted.answer, database=alias, model=VERIFIED_MODEL, max_rows=max_rows)
    return answer.model_copy(update={
        "agreement": None, "samples": 0, "samples_finished": 0,
        "verified": VerifiedSource(library=p.library, line=p.line, question=p.question, added_by=p.added_by,
                                   added_at=p.added_at, tags=list(p.tags), params=source_params(p.params))})


def with_library(answer: AnswerOutput, consulted: Consulted | None) -> AnswerOutput:
    """A model's answer with the similar verified questions and any note on the same one."""
    if consulted is None:
        return answer
    similar = [SimilarVerified(question=e.question, sql=e.sql, line=e.line, added_by=e.entry.added_by,
                               added_at=e.entry.added_at) for e in consulted.similar]
    return answer.model_copy(update={"similar_verified": similar, "verified_note": consulted.not_served})


def hinted(call: QuestionCall, consulted: Consulted | None, enabled: bool) -> QuestionCall:
    """The call with the similar verified answers in its evidence (--verified-hints), after the
    database's notes and before the caller's own evidence."""
    hints = consulted.hints() if consulted is not None and enabled and call.use_verified else None
    if hints is None:
        return call
    parts = [part for part in (call.notes, hints, call.given_evidence) if part]
    return replace(call, evidence=FACT_SEPARATOR.join(parts))


def audit_fields(answer: AnswerOutput) -> dict[str, object]:
    """What the episode log keeps of the library's part in an answer (lines, not SQL)."""
    fields: dict[str, object] = {}
    if answer.verified is not None:
        source: dict[str, object] = {"library": answer.verified.library, "line": answer.verified.line}
        if answer.verified.params:  # the values read from the question (which the log holds too)
            source["params"] = {n: p.value for n, p in answer.verified.params.items()}
        fields["verified"] = source
    if answer.similar_verified:
        fields["similar_verified"] = [s.line for s in answer.similar_verified]
    if answer.verified_note:
        fields["verified_note"] = answer.verified_note
    return fields
