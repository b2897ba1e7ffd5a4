"""Hints from a verified library for each question of a run (`eval --verified FILE --verified-hints`).

For each question, the library entries most similar to it on the same database go to the
model as evidence, before the question's own evidence, exactly as the server gives them with
--verified-hints. An entry asking the question itself is left out (leave-one-out): with the
golden file as its own library, a run measures what the *other* verified answers add. Two runs
of the same questions, with and without hints, compared by `sqale-agent report a b`, measure
whether hints help this model on this data.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..episode import EpisodeSettings
from ..golden_file import parse_lines, read_text
from ..sqlite import Database
from ..verified import VerifiedLibrary, consult


@dataclass(frozen=True)
class Hinted:
    """The evidence hints give one question, and the library questions they came from."""

    evidence: str | None
    questions: tuple[str, ...]


class HintSource:
    """One VerifiedLibrary per database of the run, read from one file, opened on first use."""

    def __init__(self, path: Path, *, report: Callable[[str], None] | None = None) -> None:
        self.path = path
        self._report = report or (lambda line: print(f"sqale-agent eval: {line}", file=sys.stderr))
        # Every database the file names: an entry for another database of the run is not refused.
        self._names = frozenset(e.database for _, e in parse_lines(read_text(path)) if not isinstance(e, str))
        self._libraries: dict[str, VerifiedLibrary] = {}

    async def hints(self, db_id: str, database: Database, question: str) -> Hinted:
        """The hints for `question` on `db_id`; none when the library holds nothing like it."""
        library = self._libraries.get(db_id)
        if library is None:
            library = self._libraries[db_id] = VerifiedLibrary(
                self.path, db_id, shared_with=self._names, report=self._report
            )
        consulted = await consult(
            library, database, question, None, settings=EpisodeSettings(), use_exact=False, leave_out_same=True
        )
        return Hinted(consulted.hints(), tuple(e.question for e in consulted.hinted()))
