"""`sqale-agent golden`: build golden questions on your own database as you work (`add`), and
review what clients proposed for a verified library (`proposals`, `accept`, `reject`)."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import ConfigError
from ..golden_file import (
    FROM_LOG_TAG,
    GoldenEntry,
    ParamSpec,
    SlotType,
    append_entries,
    database_reference,
    now_iso,
    validation_text,
)
from ..jsonl import split_lines
from ..sqlite import Database, SqlValue
from ..text import plural
from ..verified.checks import SqlRefusal, template_sample
from ..verified.templates import Template, template_of, unbound_refusal
from .golden_review import add_review_actions, run_review

DEFAULT_FILE = "golden.jsonl"
COUNT_CAP = 1_000_000  # rows counted for row_count; past it the count is a lower bound
ANSWERED = ("submitted", "final_answer")  # episode-log statuses whose SQL is the model's answer


DESCRIPTION = (
    "Keep a JSON Lines file of questions with known-good SQL, then measure the "
    "model on it with `sqale-agent eval FILE.jsonl --db ALIAS=PATH` or serve it as a "
    "verified library; review what clients proposed for a library with `proposals`, "
    "`accept` and `reject`."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The actions of `sqale-agent golden` and their arguments."""
    actions = parser.add_subparsers(dest="golden_command", metavar="ACTION", title="actions")
    by = argparse.ArgumentParser(add_help=False)
    by.add_argument(
        "--by", metavar="NAME", help="who adds or decides, recorded with the time (default: your user name)"
    )
    add = actions.add_parser(
        "add",
        parents=[by],
        help="append a checked question, or candidates from a server's episode log",
        description="Runs the SQL first (read-only) and appends the question with its row count; "
        "SQL that fails is refused. With --from-log, answered questions of the "
        "server's --episode-log become candidate entries to review.",
    )
    add.add_argument("question", nargs="?", help="the question, in plain language")
    add.add_argument("sql", nargs="?", help="the known-good SQL that answers it")
    add.add_argument(
        "--db",
        action="append",
        default=[],
        metavar="PATH|ALIAS=PATH",
        help="the database (ALIAS=PATH stores the alias; with --from-log, one per alias in the log)",
    )
    add.add_argument(
        "--file",
        default=DEFAULT_FILE,
        metavar="FILE.jsonl",
        help=f"the golden file to append to (default {DEFAULT_FILE})",
    )
    add.add_argument("--evidence", metavar="TEXT", help="a hint the question needs")
    add.add_argument(
        "--tag",
        action="append",
        default=[],
        metavar="TAG",
        help="a label to group results by, e.g. revenue (repeatable)",
    )
    add.add_argument(
        "--from-log",
        metavar="EPISODES.jsonl",
        help="take the answered questions of a server episode log as candidates",
    )
    add.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=TYPE[:ARG]",
        help="make the entry a template: the question writes {NAME}, the SQL :NAME; TYPE is "
        f"{', '.join(t.value for t in SlotType)}; ARG is MIN..MAX for a number type "
        "(either side may be left out) and TABLE.COLUMN for a value (repeatable)",
    )
    add_review_actions(actions, DEFAULT_FILE, by)


def run(args: argparse.Namespace) -> int:
    """Append one checked entry, or the candidates from a log; 1 when the SQL fails."""
    if args.golden_command is None:  # `sqale-agent golden` alone: what it can do
        args.print_help(sys.stderr)
        return 2
    if args.golden_command != "add":
        return run_review(args, added_by)
    golden_file = Path(args.file).expanduser()
    if args.from_log:
        if args.question or args.sql:
            raise ConfigError("give either QUESTION SQL or --from-log, not both")
        return _add_from_log(Path(args.from_log).expanduser(), golden_file, args)
    if not (args.question and args.question.strip() and args.sql and args.sql.strip()):
        raise ConfigError(
            'give the question and its SQL: golden add --db sales.db "How many '
            'orders are there?" "SELECT count(*) FROM orders"'
        )
    if len(args.db) != 1:
        raise ConfigError("give the database with one --db PATH (or --db ALIAS=PATH)")
    name, path = _database_arg(args.db[0], golden_file)
    entry = _new_entry(args, name)
    checked = _checked(path, entry)
    if isinstance(checked, str):
        print(
            f"sqale-agent golden add: the SQL failed on {path}: {checked}; fix it (it must run "
            "and return the right rows) before adding it",
            file=sys.stderr,
        )
        return 1
    rows, sample = checked
    if entry.params is None:
        entry = entry.model_copy(update={"row_count": rows})
    added = append_entries(golden_file, [entry])
    if not added:
        print(f"already in {golden_file}: {entry.question!r} on {name}")
        return 0
    with_values = ", ".join(f"{k} = {v!r}" for k, v in sample.items())
    print(
        f"added to {golden_file}: {entry.question!r} on {name} ({plural(rows, 'row')}"
        + (
            f" with {with_values}; a template: each question it fits is answered with its own values)"
            if entry.params
            else ")"
        )
    )
    return 0


def _new_entry(args: argparse.Namespace, name: str) -> GoldenEntry:
    """The entry `golden add` was given; ConfigError saying what is wrong with it."""
    params = dict(param_arg(v) for v in args.param) or None
    try:
        entry = GoldenEntry(
            question=args.question.strip(),
            sql=args.sql.strip(),
            database=name,
            evidence=args.evidence,
            tags=tuple(args.tag),
            params=params,
            added_by=added_by(args),
            added_at=now_iso(),
        )
    except ValidationError as exc:
        raise ConfigError(f"--param: {validation_text(exc)}") from exc
    why = unbound_refusal(entry.sql) if params is None else template_of(entry)
    if isinstance(why, str):
        raise ConfigError(f"not added: {why}")
    return entry


def param_arg(value: str) -> tuple[str, ParamSpec]:
    """`--param NAME=TYPE[:ARG]` as (name, spec): ARG is MIN..MAX, or TABLE.COLUMN for a value."""
    name, sep, rest = value.partition("=")
    kind, _, arg = rest.partition(":")
    if not (sep and name.strip() and kind.strip()):
        raise ConfigError(
            f"--param {value}: give NAME=TYPE[:ARG], e.g. --param month=month, --param "
            "n=top:1..100 or --param genre=value:Genre.Name"
        )
    spec: dict[str, object] = {"type": kind.strip()}
    if kind.strip() == SlotType.VALUE:
        spec["column"] = arg.strip() or None
    elif arg.strip():
        low, dots, high = arg.partition("..")
        if not dots:
            raise ConfigError(f"--param {value}: bounds are MIN..MAX, e.g. {name}={kind}:1..100")
        try:
            spec.update({k: _number(v) for k, v in (("min", low), ("max", high)) if v.strip()})
        except ValueError as exc:
            raise ConfigError(f"--param {value}: bounds are numbers, e.g. {name}={kind}:1..100") from exc
    try:
        return name.strip(), ParamSpec.model_validate(spec)
    except ValidationError as exc:
        raise ConfigError(f"--param {value}: {validation_text(exc)}") from exc


def _number(text: str) -> int | float:
    return int(text) if text.strip().lstrip("-").isdigit() else float(text)


def _checked(path: Path, entry: GoldenEntry) -> tuple[int, dict[str, SqlValue]] | str:
    """How many rows the entry's SQL returns (a template's with sample values), or why it fails."""
    # The operator's own SQL on their own file (golden add has no hide rules to apply).
    with Database.unruled(path) as db:
        template = template_of(entry) if entry.params else None
        sample = template_sample(db, template) if isinstance(template, Template) else {}
        if isinstance(sample, SqlRefusal):
            return sample.reason
        result = db.query(entry.sql, max_rows=0, count_cap=COUNT_CAP, params=sample or None)
    if not result.ok:
        return result.error or result.status.value
    return result.total_rows, sample


def added_by(args: argparse.Namespace) -> str | None:
    """Who adds the entries: --by, else the user name of this session (None when unknown)."""
    if args.by and args.by.strip():
        return str(args.by).strip()
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no user name in the environment or the password database
        return None


def checked_row_count(path: Path, sql: str) -> int | str:
    """How many rows `sql` returns on the database, or SQLite's error text."""
    # The operator's own SQL on their own file (golden add has no hide rules to apply).
    with Database.unruled(path) as db:
        result = db.query(sql, max_rows=0, count_cap=COUNT_CAP)
    if not result.ok:
        return result.error or result.status.value
    return result.total_rows


def _database_arg(value: str, golden_file: Path) -> tuple[str, Path]:
    """(name stored in the file, path): the alias of ALIAS=PATH, else the path relative to the file."""
    alias, sep, path = value.partition("=")
    if sep and alias.strip() and path.strip() and not Path(value).exists():
        return alias.strip(), Path(path.strip()).expanduser()
    file = Path(value).expanduser()
    return database_reference(file, golden_file), file


def _add_from_log(log: Path, golden_file: Path, args: argparse.Namespace) -> int:
    """Append each answered question of the log whose SQL runs as a candidate (tag from-log)."""
    databases = dict(_database_arg(v, golden_file) for v in args.db)
    who = added_by(args)
    candidates = []
    skipped: dict[str, int] = {}
    read = 0
    for record in _log_records(log):
        read += 1
        alias = str(record.get("database"))
        rows: int | str = 0
        if record.get("status") not in ANSWERED or not record.get("sql"):
            why = "not answered (failed, or only a fallback)"
        elif alias not in databases:
            why = f"no --db {alias}=PATH"
        elif isinstance(rows := checked_row_count(databases[alias], record["sql"]), str):
            why = "their SQL fails now"
        else:
            why = ""
        if why or isinstance(rows, str):
            skipped[why] = skipped.get(why, 0) + 1
            continue
        try:
            candidates.append(
                GoldenEntry(
                    question=record["question"],
                    sql=record["sql"],
                    database=alias,
                    evidence=record.get("evidence") or None,
                    tags=(*args.tag, FROM_LOG_TAG),
                    row_count=rows,
                    added_by=who,
                    added_at=now_iso(),
                )
            )
        except ValidationError:  # e.g. a lone surrogate (JSON allows it, UTF-8 text does not)
            why = "their question, SQL or evidence is not valid Unicode text"
            skipped[why] = skipped.get(why, 0) + 1
    added = append_entries(golden_file, candidates)
    print(
        from_log_summary(
            log,
            golden_file,
            read=read,
            added=added,
            skipped={**skipped, f"already in {golden_file}": len(candidates) - added},
        )
    )
    return 0


def from_log_summary(log: Path, golden_file: Path, *, read: int, added: int, skipped: Mapping[str, int]) -> str:
    """What `golden add --from-log` did: how many it added, and why it left each of the others out."""
    head = f"{plural(added, 'candidate question')} added to {golden_file} (tag {FROM_LOG_TAG})"
    if read == 0:
        return f"{head}: {log} holds no question; give the file the server writes with --episode-log."
    left = "".join(f"; {n} left out: {why}" for why, n in sorted(skipped.items()) if n)
    text = f"{head} of the {plural(read, 'question')} in {log}{left}."
    if added:
        text += (
            f" The SQL is the model's: check each one, fix or delete it, and drop the {FROM_LOG_TAG} "
            "tag once it is known good (a verified library serves no entry still tagged so)."
        )
    return text


def _log_records(log: Path) -> Iterator[Mapping[str, Any]]:
    try:
        text = log.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"--from-log {log}: cannot be read ({exc.strerror}); give the server's --episode-log file"
        ) from exc
    for number, line in split_lines(text):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"--from-log {log}: line {number} is not JSON; give the server's --episode-log file"
            ) from exc
        if isinstance(record, dict) and isinstance(record.get("question"), str):
            yield record
