"""An older commit's tree, for the benchmarks that measure it beside this checkout (--before REF)."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def extract_tree(ref: str, into: Path, *paths: str) -> Path:
    """The tree of commit `ref` of this repository (only `paths` when given), written under `into`."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", ref, *paths],
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into
