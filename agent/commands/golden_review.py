"""`sqale-agent golden proposals|accept|reject`: the library owner reviews what clients proposed.

A server's "Propose as verified" only proposes (agent.verified.saving); these actions list the
proposals beside a library, move one into it once checked as loading checks it (`accept`), or
record a refusal (`reject`). Everything a client wrote is shown escaped: a question or SQL can
neither move the terminal's cursor nor pose as a line of this listing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from ..errors import ConfigError
from ..sqlite import Database, HideRules
from ..text import escape_unsafe, plural, quoted_text
from ..verified import VerifiedLibrary
from ..verified.proposals import ProposalBook, Proposed, proposals_path, read_proposals
from ..verified.reviewing import Reviewed, accept, find_pending, reject
from .argparse_shim import SubParsers
from .db_options import add_hide_argument

LISTED_QUESTION_CHARS = 500


def add_review_actions(
    actions: SubParsers[argparse.ArgumentParser], default_file: str, add_by: argparse.ArgumentParser
) -> None:
    """The `proposals`, `accept` and `reject` actions (`add_by` gives each the --by flag)."""
    listing = actions.add_parser(
        "proposals",
        help="list what clients proposed for a verified library, awaiting review",
        description="Lists the proposals beside the library (FILE.proposals.jsonl) that no one has "
        "accepted or rejected yet; none of them is served until accepted.",
    )
    _file_argument(listing, default_file)
    listing.add_argument("--all", action="store_true", help="also list the proposals already decided on")
    taking = actions.add_parser(
        "accept",
        parents=[add_by],
        help="move proposals into the verified library, checked first",
        description="Checks each proposal as a server loading the library checks an entry (its SQL "
        "runs read-only under the hide rules given, reads nothing hidden, answers no "
        "question the library answers otherwise), then appends it to the library.",
    )
    taking.add_argument("ids", nargs="+", metavar="ID", help="the proposals to accept, as listed")
    _file_argument(taking, default_file)
    taking.add_argument(
        "--db",
        action="append",
        default=[],
        required=True,
        metavar="ALIAS=PATH",
        help="the database a proposal is for, under the alias the server serves it as (repeatable)",
    )
    add_hide_argument(taking)
    refusing = actions.add_parser(
        "reject",
        parents=[add_by],
        help="record that proposals are not to be served",
        description="Records the decision in the proposals file; a rejected proposal is never "
        "served, and the same SQL proposed again for its question is refused.",
    )
    refusing.add_argument("ids", nargs="+", metavar="ID", help="the proposals to reject, as listed")
    _file_argument(refusing, default_file)
    refusing.add_argument("--why", metavar="TEXT", help="why (the client that proposes it again is told)")


def _file_argument(parser: argparse.ArgumentParser, default_file: str) -> None:
    parser.add_argument(
        "--file",
        default=default_file,
        metavar="FILE.jsonl",
        help=f"the verified library the proposals are for (default {default_file})",
    )


def run_review(args: argparse.Namespace, who: Callable[[argparse.Namespace], str | None]) -> int:
    """Run `proposals`, `accept` or `reject` (`who` tells who decides); 1 when a proposal could not
    be decided on."""
    library_path = Path(args.file).expanduser()
    if args.golden_command == "proposals":
        print(proposals_listing(library_path, _book(library_path), every=args.all))
        return 0
    by = who(args)
    book = _book(library_path)
    outcomes: list[Reviewed] = []
    for ident in dict.fromkeys(args.ids):
        found = find_pending(book, ident, library_path)
        if isinstance(found, Reviewed):
            outcomes.append(found)
        elif args.golden_command == "reject":
            outcomes.append(reject(library_path, found, by=by, why=args.why))
        else:
            outcomes.append(_accepted(library_path, found, args, by))
    for outcome in outcomes:
        print(outcome.message, file=sys.stdout if outcome.done else sys.stderr)
    return 0 if all(o.done for o in outcomes) else 1


def _book(library_path: Path) -> ProposalBook:
    try:
        return read_proposals(proposals_path(library_path))
    except OSError as exc:
        raise ConfigError(f"{proposals_path(library_path)}: cannot be read ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{proposals_path(library_path)}: not UTF-8 text") from exc


def _accepted(library_path: Path, found: Proposed, args: argparse.Namespace, by: str | None) -> Reviewed:
    """Accept `found` against the --db the proposal names, under the --hide rules."""
    alias = found.proposal.database
    paths = dict(_alias_path(value) for value in args.db)
    if alias not in paths:
        return Reviewed(
            False,
            f"proposal {found.proposal.proposal} is for '{alias}': give --db {alias}=PATH "
            "(the file the server serves as that alias)",
        )
    library = VerifiedLibrary(
        library_path,
        alias,
        shared_with=set(paths) - {alias},
        report=lambda line: print(f"sqale-agent golden: {line}", file=sys.stderr),
    )
    with Database(paths[alias], hide=HideRules.parse(args.hide)) as database:
        return accept(library, database, found, by=by)


def _alias_path(value: str) -> tuple[str, Path]:
    alias, sep, path = value.partition("=")
    if not (sep and alias.strip() and path.strip()):
        raise ConfigError(
            f"--db {value}: give ALIAS=PATH, the alias the proposals name and the file "
            "the server serves under it"
        )
    return alias.strip(), Path(path.strip()).expanduser()


def proposals_listing(library_path: Path, book: ProposalBook, *, every: bool = False) -> str:
    """The proposals for the owner to review: id, database, who and when, question, evidence, SQL."""
    shown = book.proposals if every else book.pending()
    where = proposals_path(library_path).name
    waiting = len(book.pending())
    head = (
        f"{where}: {plural(waiting, 'proposal')} awaiting review"
        if waiting
        else f"{where}: no proposal awaiting review"
    )
    lines = [head + (f" (of {len(book.proposals)})" if every else "")]
    for item in shown:
        p = item.proposal
        status = "" if item.decision is None else f" [{item.decision.decision}{_decided(item)}]"
        lines += [
            "",
            f"{p.proposal}  on '{escape_unsafe(p.database)}', proposed by "
            f"{escape_unsafe(p.proposed_by)} at {escape_unsafe(p.proposed_at)}{status}",
            f"  question: {quoted_text(p.question, LISTED_QUESTION_CHARS)}",
        ]
        if p.evidence:
            lines.append(f"  evidence: {quoted_text(p.evidence, LISTED_QUESTION_CHARS)}")
        lines.append(f"  sql (sha256 {p.sql_sha256[:16]}):")
        lines += [f"    | {escape_unsafe(row, keep=chr(9))}" for row in p.sql.split("\n")]
    if waiting and not every:
        lines += [
            "",
            f"accept: sqale-agent golden accept --file {library_path} --db ALIAS=PATH [--hide RULE]... ID",
            f"reject: sqale-agent golden reject --file {library_path} [--why TEXT] ID",
        ]
    lines += [f"{where} {problem} (left out)" for problem in book.problems]
    return "\n".join(lines)


def _decided(item: Proposed) -> str:
    d = item.decision
    if d is None:
        return ""
    parts = [
        f" by {escape_unsafe(d.by)}" if d.by else "",
        f" at {d.at}",
        f", line {d.line}" if d.line else "",
        f": {quoted_text(d.why, 200)}" if d.why else "",
    ]
    return "".join(parts)
