"""Verified answers: a golden-question file served per database, in three tiers.

- `matching`: when two questions are the same (one rule, stated in one sentence), the words a
  similar one is searched by, and the evidence note that gives similar verified answers to the
  model (pure);
- `templates` and `slot_types`: entries with parameters, when a question fits one (one rule, in one
  sentence) and how a slot's text is read as its type (pure); `template_tier` reads a question
  into the one template it fits, looking a `value` slot up in its column;
- `library`: loading a file, the checks that refuse an entry (`checks`: its SQL run under the
  hide rules), reloading when the file changes;
- `answering`: one question against a library (`consult`): the verified answer, the similar
  questions to list, the hints;
- `saving`: a client's "Propose as verified", checked like any entry and kept as a proposal
  (`proposals`: the file beside the library), never served;
- `reviewing`: the owner accepting a proposal into the library (checked again) or rejecting it.
"""

from __future__ import annotations

from .answering import (
    Consulted,
    Provenance,
    consult,
    params_text,
    provenance_text,
    similar_text,
    verified_tier,
)
from .library import LibraryEntry, Refusal, Snapshot, VerifiedLibrary
from .matching import SAME_QUESTION_RULE, hint_evidence, normalise_question
from .template_tier import BoundParam, TemplateMiss
from .templates import TEMPLATE_RULE

__all__ = [
    "SAME_QUESTION_RULE",
    "TEMPLATE_RULE",
    "BoundParam",
    "Consulted",
    "LibraryEntry",
    "Provenance",
    "Refusal",
    "Snapshot",
    "TemplateMiss",
    "VerifiedLibrary",
    "consult",
    "hint_evidence",
    "normalise_question",
    "params_text",
    "provenance_text",
    "similar_text",
    "verified_tier",
]
