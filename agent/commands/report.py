"""`sqale-agent report`: the HTML page of an evaluation run, or of two runs compared."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import SqaleError
from ..evaluation.html_report import default_report_path, write_report

EXIT_OK, EXIT_USAGE = 0, 2


DESCRIPTION = (
    "Build one self-contained HTML page from the results file of `sqale-agent eval`: "
    "accuracy, charts and every question with its SQL, results and trace. With two "
    "files, compare the runs question by question. Needs matplotlib (the `report` extra; "
    "without it the command says how to add it to this installation)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of `sqale-agent report`."""
    parser.add_argument(
        "results",
        nargs="+",
        metavar="RESULTS.jsonl",
        help="the --out file of an eval run; give two to compare them (A then B)",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="where to write the page (default: next to the first file, <name>.html, or <a>-vs-<b>.html)",
    )


def run(args: argparse.Namespace) -> int:
    """Write the page; print where it went."""
    results = [Path(p) for p in args.results]
    if len(results) > 2:
        print("sqale-agent report: give one results file, or two to compare", file=sys.stderr)
        return EXIT_USAGE
    out = Path(args.output) if args.output else default_report_path(results)
    try:
        write_report(results, out)
    except SqaleError as exc:
        print(f"sqale-agent report: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"report: {out} ({out.stat().st_size / 1e6:.1f} MB)")
    return EXIT_OK
