"""How to add an optional extra (agent/install_hints.py): one command per way of installing, never a
package that is not on PyPI. A real `uv tool install` follows its hint in tests/project/test_wheel.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agent.install_hints import Installation, extra_libraries, install_hint, installation
from tests.support.mcp import REPO

REQUIRES = (
    "mcp<2.4,>=2.3",
    'matplotlib<4,>=3.8; extra == "report"',
    'opentelemetry-sdk<2,>=1.28; extra == "otel"',
    'opentelemetry-distro<1,>=0.49b0; extra == "otel"',
    'matplotlib<4,>=3.8; extra == "dev"',
)
PY = "/home/ann/.venv/bin/python"


@pytest.mark.parametrize(
    ("found", "hint"),
    [
        (
            Installation("clone", PY, "/home/ann/sqale mcp", requirements=REQUIRES),
            "/home/ann/.venv/bin/python -m pip install -e '/home/ann/sqale mcp[report]'",
        ),
        (
            Installation("pipx", PY, "sqale-mcp", requirements=REQUIRES),
            "pipx inject sqale-mcp 'matplotlib<4,>=3.8'",
        ),
        (
            Installation("uv-tool", PY, "/home/ann/sqale-mcp", ("pandas>=2",), REQUIRES),
            "uv tool install /home/ann/sqale-mcp --with 'pandas>=2' --with 'matplotlib<4,>=3.8'",
        ),
        (
            Installation("uv-tool", PY, "--editable /src", ("Matplotlib>=3",), REQUIRES),
            "uv tool install --editable /src --with 'matplotlib<4,>=3.8'",
        ),
        (
            Installation("pip", PY, requirements=REQUIRES),
            "/home/ann/.venv/bin/python -m pip install 'matplotlib<4,>=3.8'",
        ),
        (
            Installation("uv-tool", PY, None, requirements=REQUIRES),  # a receipt we cannot read: the library
            "/home/ann/.venv/bin/python -m pip install 'matplotlib<4,>=3.8'",
        ),
        (
            Installation("pip", PY),
            "install the `report` extra of sqale-mcp (its pyproject.toml lists it) for "
            "/home/ann/.venv/bin/python",
        ),
    ],
)
def test_each_way_of_installing_gets_its_own_command(found: Installation, hint: str) -> None:
    """A clone: its extra, editable; pipx: inject; uv tool: reinstall --with; else the library with
    this interpreter's pip. Never `sqale-mcp[report]` from an index: it is not on PyPI."""
    assert install_hint("report", found) == hint


def test_the_extras_libraries_come_from_the_metadata() -> None:
    """The installed metadata names each extra's libraries with pyproject.toml's bounds."""
    assert extra_libraries("otel", REQUIRES) == (
        "opentelemetry-sdk<2,>=1.28",
        "opentelemetry-distro<1,>=0.49b0",
    )
    assert extra_libraries("report", installation().requirements) == ("matplotlib<4,>=3.8",)


def test_the_environment_says_how_it_was_installed(tmp_path: Path) -> None:
    """pipx leaves pipx_metadata.json, uv tool uv-receipt.toml (with how it was given and what else it
    was installed with); this checkout is an editable clone."""
    pipx = tmp_path / "pipx"
    pipx.mkdir()
    (pipx / "pipx_metadata.json").write_text(json.dumps({"main_package": {"package": "sqale-mcp"}}))
    assert (installation(pipx).kind, installation(pipx).source) == ("pipx", "sqale-mcp")
    receipts = {
        '{ name = "sqale-mcp", directory = "/src/sqale mcp" }': "'/src/sqale mcp'",
        '{ name = "sqale-mcp", editable = "/src" }': "--editable /src",
        '{ name = "sqale-mcp", git = "https://example.invalid/sqale.git" }': "git+https://example.invalid/sqale.git",
        '{ name = "sqale-mcp", specifier = "==0.1" }': "sqale-mcp==0.1",
    }
    for requirement, source in receipts.items():
        uv = tmp_path / f"uv{len(source)}"
        uv.mkdir()
        (uv / "uv-receipt.toml").write_text(
            f'[tool]\nrequirements = [{requirement}, {{ name = "pandas", specifier = ">=2" }}]\n'
        )
        assert installation(uv) == Installation(
            "uv-tool", sys.executable, source, ("pandas>=2",), installation(uv).requirements
        )
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "uv-receipt.toml").write_text("not toml [")
    assert installation(tmp_path / "broken").source is None
    here = installation(tmp_path)
    if here.kind == "clone":  # `pip install -e .` (the README's set-up); CI may install otherwise
        assert here.source == str(REPO)


def test_no_hint_names_a_package_that_is_not_on_pypi() -> None:
    """Code and docs never tell anyone to install `sqale-mcp[...]` from an index."""
    found = [
        f"{path.relative_to(REPO)}:{n}"
        for top in ("agent", "mcp_server", "docs")
        for path in (REPO / top).rglob("*")
        if path.suffix in (".py", ".md", ".json", ".html")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "sqale-mcp[" in line
    ]
    readme = [
        n for n, line in enumerate((REPO / "README.md").read_text().splitlines(), 1) if "sqale-mcp[" in line
    ]
    assert (found, readme) == ([], [])
