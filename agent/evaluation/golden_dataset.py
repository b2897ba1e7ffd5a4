"""A user's own question set as a dataset for `eval`: a golden-question file (agent.golden_file)
whose `database` names are resolved to files. A template (an entry with `params`) is no question
to ask: it is left out, and said so."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from ..errors import ConfigError
from ..golden_file import read_golden
from .datasets import Benchmark, Dataset, Example


def load_golden(
    path: Path, databases: Mapping[str, Path], report: Callable[[str], None] | None = None
) -> Dataset:
    """The golden file as a dataset; `databases` maps the aliases given with --db to files."""
    every = read_golden(path)
    entries = [e for e in every if not e.params]
    if len(entries) < len(every):
        (report or (lambda line: print(f"sqale-agent eval: {line}", file=sys.stderr)))(
            f"{path}: {len(every) - len(entries)} of its entries are templates (with params), left out: a "
            "template is no question to ask; eval measures the model on plain questions"
        )
    if not entries:
        raise ConfigError(f"{path}: no questions in it; add some with `sqale-agent golden add`")
    paths: dict[str, Path] = {}
    for number, entry in enumerate(entries, start=1):
        if entry.database in paths:
            continue
        if entry.database in databases:
            paths[entry.database] = databases[entry.database]
            continue
        candidate = path.parent / Path(entry.database).expanduser()
        if not candidate.is_file():
            raise ConfigError(
                f"{path}: question {number} names database {entry.database!r}, which is neither "
                f"a --db alias ({', '.join(databases) or 'none given'}) nor a file next to the "
                f"question file; pass --db {entry.database}=PATH"
            )
        paths[entry.database] = candidate
    examples = tuple(
        Example(
            key=str(i),
            index=i,
            db_id=e.database,
            question=e.question,
            gold_sql=e.sql,
            evidence=e.evidence or None,
            tags=e.tags,
        )
        for i, e in enumerate(entries)
    )
    return Dataset(Benchmark.GOLDEN, path, path.parent, examples, db_paths=paths)
