"""Adding one entry to a verified library (the answer view's "Save as verified").

The entry is checked as loading checks it (its SQL runs in the guarded worker under the hide
rules, and only under them, and may read nothing hidden) and must not contradict an entry
already there; then it is appended as one line, with who saved it and when. What the saver is
told comes from the run under the rules alone: a hidden name reads as a missing one, and no
library line's reason is repeated to them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..episode_text import clip
from ..golden_file import GoldenEntry, append_entries, now_iso
from ..sqlite import Database
from .library import VerifiedLibrary, sql_refusal
from .matching import normalise_question


@dataclass(frozen=True)
class Saved:
    """The outcome of a save: whether a line was added, and what to tell the user."""

    added: bool
    message: str
    line: int | None = None  # the entry's line in the file, when it is served


def save_entry(library: VerifiedLibrary, database: Database, *, question: str, sql: str,
               evidence: str | None, added_by: str) -> Saved:
    """Check one question and its SQL, then append it to the library's file (blocking)."""
    asked, query = question.strip(), sql.strip()
    if not normalise_question(asked) or not query:
        return Saved(False, "Not saved: give the question and its SQL.")
    name = library.path.name
    with library.write_lock:
        snapshot = library.current(database)
        key = normalise_question(asked)
        held = next((e for e in snapshot.entries if e.key == key), None)
        if held is not None:
            if " ".join(held.sql.split()) == " ".join(query.split()):
                return Saved(False, f"Already verified: {name} line {held.line} holds this question with "
                                    "this SQL.", held.line)
            return Saved(False, f"Not saved: {name} line {held.line} already answers this question with "
                                "other SQL. Ask the library's owner to correct that line.")
        refused = next((r for r in snapshot.refusals
                        if r.question is not None and normalise_question(r.question) == key), None)
        if refused is not None:  # its reason is the operator's to read, in the server log
            return Saved(False, f"Not saved: {name} line {refused.line} asks this question already and is "
                                "not served; ask the library's owner to fix that line.")
        verdict = sql_refusal(database, query)  # under the rules only: see its docstring
        if verdict is not None:
            return Saved(False, f"Not saved: {verdict.reason}.")
        entry = GoldenEntry(question=asked, sql=query, database=library.alias,
                            evidence=(evidence or "").strip() or None, added_by=added_by, added_at=now_iso())
        append_entries(library.path, [entry])
        served = library.current(database).exact(asked, entry.evidence)
    if served is None:  # e.g. the file was edited at the same moment: say so, do not claim it
        return Saved(True, f"Saved to {name}, but it is not served yet: the library refused it on "
                           "reload (the server log says why).")
    return Saved(True, f"Saved as verified in {name} line {served.line}: \"{clip(asked, 120)}\" on "
                       f"'{library.alias}' is now answered at once with this SQL.", served.line)
