"""The official MCP conformance suite against our streamable-HTTP server, with a baseline of the
scenarios that do not apply (.ci/conformance-baseline.yml says why for each)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.mcp import BOOK_GOLD, REPO, running_http_server
from tests.support.node_tools import node_env, node_tool
from tests.support.policies import OraclePolicy

pytestmark = pytest.mark.slow

CONFORMANCE = "@modelcontextprotocol/conformance@0.1.16"  # the version .ci/run installs
BASELINE = REPO / ".ci" / "conformance-baseline.yml"


@pytest.mark.timeout(600)
def test_conformance_server_scenarios_pass_but_the_baseline(tmp_path: Path, fake_ollama: Any) -> None:
    """Every active server scenario passes except those the baseline lists, and none of those passes."""
    conformance = node_tool("conformance", CONFORMANCE)
    fake = fake_ollama(OraclePolicy(BOOK_GOLD))
    # Loopback without a token: the suite sends no Authorization header (tokens: test_mcp_eras.py).
    with running_http_server(tmp_path, "--demo", "--ollama-host", fake.url) as url:
        done = subprocess.run(
            [
                str(conformance),
                "server",
                "--url",
                url,
                "--expected-failures",
                str(BASELINE),
                "-o",
                str(tmp_path / "results"),
            ],
            cwd=tmp_path,
            env=node_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=540,
        )
    assert done.returncode == 0, done.stdout[-4_000:] + done.stderr[-2_000:]
    assert "Baseline check passed" in done.stdout
    listed = subprocess.run(
        [str(conformance), "list", "--server"],
        env=node_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    # Every scenario in the baseline is one the suite has, and says why it does not apply.
    scenarios = {line.split()[1] for line in listed.splitlines() if line.startswith("  - ")}
    assert set(baseline_reasons()) <= scenarios


def baseline_reasons() -> dict[str, str]:
    """The baseline's scenarios and the reason written after each (its YAML is a plain list)."""
    entries = {}
    for line in BASELINE.read_text().splitlines():
        if line.startswith("  - "):
            name, _, reason = line.removeprefix("  - ").partition("#")
            entries[name.strip()] = reason.strip()
    return entries


def test_every_baseline_entry_says_why() -> None:
    """Each scenario left out of the conformance run carries its reason."""
    reasons = baseline_reasons()
    assert len(reasons) >= 20 and all(len(reason) > 20 for reason in reasons.values()), reasons
