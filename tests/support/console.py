"""The installed console scripts (`sqale-mcp`, `sqale-agent`), run as a user runs them."""

from __future__ import annotations

import shutil
import signal
import sys
from pathlib import Path

import pytest


def console_script(name: str) -> str:
    """The path of the console script `name` installed with this interpreter; skip if absent."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -e . puts it beside {sys.executable})")
    return found


def default_sigint() -> None:
    """In a child about to exec: SIGINT back to its default action, as a terminal's command has it.

    A test run started in the background (`pytest &` from a script, some CI runners) ignores
    SIGINT, children inherit that, and Python then never raises KeyboardInterrupt, so a Ctrl-C
    test would fail for a reason that has nothing to do with the product.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def shadowing_folder(folder: Path) -> Path:
    """A workspace with its own unrelated `agent` and `mcp_server` packages, as AI projects have."""
    for package in ("agent", "mcp_server"):
        (folder / package).mkdir(parents=True, exist_ok=True)
        (folder / package / "__init__.py").write_text(
            "raise ImportError('this is the workspace package, not sqale-mcp')\n", encoding="utf-8"
        )
    return folder
