"""JSON Lines, the one codec for every file the project writes and reads back.

The verified libraries and their proposals, the server's episode log and eval's results
file are all one JSON object per line. A line ends at "\\n" and nowhere else: `str.splitlines()`
also breaks at U+2028, U+2029, NEL (U+0085), form feed and four more, so a question holding
one of them would split its own line. Writing, those characters (and lone surrogates, which
UTF-8 cannot encode) are escaped as JSON `\\uXXXX`, which every JSON reader decodes back to the
same text; reading, only "\\n" ends a line (a "\\r" before it, from an editor on Windows, is
JSON whitespace). Every other character is written as itself, so the files stay readable.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

# Characters some line readers take for a line break (str.splitlines, editors, JavaScript),
# and lone surrogates. json.dumps already escapes the C0 controls, "\n" and "\r" included.
_NOT_RAW = re.compile("[\u0085\u2028\u2029\ud800-\udfff]")


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def dumps_line(value: Any, *, default: Callable[[Any], Any] | None = None) -> str:
    """`value` as one JSON line, "\\n" included; nothing in it can break the line."""
    return _NOT_RAW.sub(_escaped, json.dumps(value, ensure_ascii=False, default=default)) + "\n"


def split_lines(text: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) for each line of `text`, split at "\\n" only.

    A final line without its "\\n" is yielded too; `complete_lines` leaves it out.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for number, line in enumerate(lines, start=1):
        yield number, line.removesuffix("\r")


def file_lines(path: Path) -> Iterator[tuple[int, str]]:
    """`split_lines` of a UTF-8 file, read a line at a time (a long results file need not fit in
    memory); raises OSError and UnicodeDecodeError as `open` does."""
    with path.open(encoding="utf-8", newline="\n") as fh:
        for number, line in enumerate(fh, start=1):
            yield number, line.removesuffix("\n").removesuffix("\r")


def complete_lines(text: str) -> Iterator[tuple[int, str]]:
    """Like `split_lines`, without what follows the last "\\n" (a line cut off mid-write)."""
    end = text.rfind("\n")
    return split_lines(text[: end + 1]) if end >= 0 else iter(())


def append_lines(path: Path, lines: Iterable[str]) -> None:
    """Append whole lines (each ending in "\\n") in one write, so a reader sees each line whole or not
    at all; a file whose last line lacks its "\\n" (edited by hand) gets one first."""
    data = "".join(lines).encode("utf-8")
    if not data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    if _lacks_final_newline(path):
        data = b"\n" + data
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _lacks_final_newline(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            if fh.tell() == 0:
                return False
            fh.seek(-1, os.SEEK_END)
            return fh.read(1) != b"\n"
    except FileNotFoundError:
        return False


__all__ = ["append_lines", "complete_lines", "dumps_line", "file_lines", "split_lines"]
