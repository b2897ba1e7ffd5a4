"""Verified answers: a golden-question file served per database, in three tiers.

- `matching`: when two questions are the same (one rule, stated in one sentence), and the
  evidence note that gives similar verified answers to the model (pure);
- `library`: loading a file, the checks that refuse an entry, reloading when the file changes;
- `answering`: one question against a library (`consult`): the verified answer, the similar
  questions to list, the hints;
- `saving`: a client's "Save as verified", checked like any entry and kept as a proposal
  (`proposals`: the file beside the library), never served;
- `reviewing`: the owner accepting a proposal into the library (checked again) or rejecting it.
"""

from __future__ import annotations

from .answering import Consulted, Provenance, consult, provenance_text, similar_text
from .library import LibraryEntry, Refusal, Snapshot, VerifiedLibrary
from .matching import SAME_QUESTION_RULE, hint_evidence, normalise_question

__all__ = ["SAME_QUESTION_RULE", "Consulted", "LibraryEntry", "Provenance", "Refusal", "Snapshot",
           "VerifiedLibrary", "consult", "hint_evidence", "normalise_question", "provenance_text",
           "similar_text"]
