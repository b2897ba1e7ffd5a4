"""Notes per database: facts a user writes once ("amounts are in cents"), read with every question.

A notes file is UTF-8 text, one fact per line; blank lines and lines starting with `#` are
left out. The facts reach the model in the evidence slot of the user turn, joined with "; "
the way BIRD's evidence notes (the format the model was trained with) join theirs, before
the caller's own evidence. They are untrusted text: the prompt renderer neutralises them
like the question and the evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError

DEFAULT_MAX_NOTES_CHARS = 4_000  # about 1,000 tokens of the 12,288-token episode budget
FACT_SEPARATOR = "; "


@dataclass(frozen=True)
class Notes:
    """The facts of one notes file, ready for the evidence slot."""

    path: Path
    text: str  # the facts joined with "; ", as the model reads them (before neutralising)
    facts: int

    @property
    def chars(self) -> int:
        """Characters the notes add to the prompt."""
        return len(self.text)


def notes_text(raw: str) -> tuple[str, int]:
    """The facts of a notes file's text joined with "; ", and how many there are."""
    facts = []
    for line in raw.splitlines():
        fact = " ".join(line.split()).rstrip(";").rstrip()
        if fact and not fact.startswith("#"):
            facts.append(fact)
    return FACT_SEPARATOR.join(facts), len(facts)


def read_notes(path: str | Path, *, max_chars: int = DEFAULT_MAX_NOTES_CHARS, where: str = "--notes") -> Notes:
    """Read a notes file; ConfigError (naming `where`) when unreadable, not UTF-8 or too long."""
    file = Path(path).expanduser()
    try:
        raw = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: {file} is not UTF-8 text; save it as UTF-8") from exc
    except OSError as exc:
        raise ConfigError(f"{where}: {file} cannot be read ({exc.strerror or exc}); check the path") from exc
    text, facts = notes_text(raw)
    if not facts:
        raise ConfigError(
            f"{where}: {file} holds no facts (only blank or # lines); write one "
            'fact per line, e.g. "amounts are in cents"'
        )
    if len(text) > max_chars:
        raise ConfigError(
            f"{where}: {file} has {len(text):,} characters of facts, more than the limit of "
            f"{max_chars:,} (--max-notes-chars); shorten the notes or raise the limit"
        )
    return Notes(path=file, text=text, facts=facts)


def evidence_with_notes(notes: str | None, evidence: str | None) -> str | None:
    """The evidence the model reads: the database's notes first, then the caller's evidence."""
    if not notes:
        return evidence  # without notes the caller's evidence reaches the model as it was given
    if not evidence:
        return notes
    return notes + FACT_SEPARATOR + evidence
