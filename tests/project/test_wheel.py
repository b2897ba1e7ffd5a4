"""A built wheel installs and runs outside the clone, as `uvx` (the registry's runtime hint) runs it."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from tests.support.mcp import BOOK_GOLD, REPO, TOOL, server_env
from tests.support.policies import OraclePolicy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def uv_tool(name: str = "uv") -> str:
    """`uv` (or `uvx`) on PATH or beside this interpreter; the test is skipped without it."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip(f"{name} is absent; `pip install uv` (.ci/run does)")
    return found


def uv_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A server environment for uv: this interpreter, no Python downloads, the usual package cache."""
    return {
        **server_env(tmp_path),
        "UV_PYTHON": sys.executable,
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR", str(Path.home() / ".cache" / "uv")),
        **extra,
    }


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The wheel `uv build` makes of the package sources (staged outside the clone, as the bundle's)."""
    uv = uv_tool()
    out = tmp_path_factory.mktemp("wheel")
    staged = subprocess.run(
        [sys.executable, str(REPO / ".ci" / "build-bundle"), "--stage-only", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.strip()
    subprocess.run(
        [uv, "build", "--wheel", "--out-dir", str(out / "dist"), staged],
        capture_output=True,
        env=uv_env(out),
        timeout=600,
        check=True,
    )
    (built,) = (out / "dist").glob("*.whl")
    yield built


def test_the_wheel_holds_the_packages_and_no_tests(wheel: Path) -> None:
    """Every subpackage is in the wheel, with its console scripts; tests and repository files are not."""
    names = zipfile.ZipFile(wheel).namelist()
    packages = {n.rsplit("/", 1)[0] for n in names if n.endswith("/__init__.py")}
    expected = {
        str(p.parent.relative_to(REPO))
        for top in ("agent", "mcp_server")
        for p in (REPO / top).rglob("__init__.py")
    }
    assert packages == expected, packages ^ expected
    assert not [n for n in names if n.startswith(("tests/", "bench/", "docs/", ".ci/"))]
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "sqale-mcp = mcp_server.__main__:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_uvx_runs_the_wheel_outside_the_clone(wheel: Path, tmp_path: Path) -> None:
    """`uvx --from dist/WHEEL sqale-mcp --version` from another folder prints the version."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(
        [uv_tool("uvx"), "--from", str(wheel), "sqale-mcp", "--version"],
        cwd=elsewhere,
        env=uv_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert (done.returncode, done.stdout) == (0, f"sqale-mcp {VERSION}\n"), done.stderr


@pytest.mark.anyio
async def test_the_installed_demo_answers_from_another_folder(
    wheel: Path, tmp_path: Path, fake_ollama: Any
) -> None:
    """`sqale-mcp --demo` from the wheel (not the clone) answers initialize, lists and answers."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    fake = fake_ollama(OraclePolicy(BOOK_GOLD))
    params = StdioServerParameters(
        command=uv_tool("uvx"),
        args=["--from", str(wheel), "sqale-mcp", "--demo", "--ollama-host", fake.url],
        env=uv_env(tmp_path, PYTHONPATH=""),
        cwd=elsewhere,
    )
    async with Client(params, mode="legacy") as client:  # the initialize handshake
        assert client.server_info is not None and client.server_info.version == VERSION
        (tool,) = (await client.list_tools()).tools
        result = await client.call_tool(TOOL, {"question": "How many books are there?"})
    assert "- bookshop: 5 tables" in (tool.description or "")
    assert result.structured_content["rows"] == [[16]]
    located = subprocess.run(
        [uv_tool("uvx"), "--from", str(wheel), "python", "-c", "import mcp_server; print(mcp_server.__file__)"],
        cwd=elsewhere,
        env=uv_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert located.returncode == 0 and not located.stdout.startswith(str(REPO)), located


def test_a_uv_tool_install_is_told_a_command_that_adds_the_extra(wheel: Path, tmp_path: Path) -> None:
    """`uv tool install WHEEL` without matplotlib: the report's hint is `uv tool install WHEEL --with
    'matplotlib...'`, and running exactly that makes matplotlib importable in the tool's environment."""
    env = uv_env(
        tmp_path, UV_TOOL_DIR=str(tmp_path / "tools"), UV_TOOL_BIN_DIR=str(tmp_path / "bin"), PYTHONPATH=""
    )
    uv = uv_tool()
    subprocess.run([uv, "tool", "install", str(wheel)], env=env, capture_output=True, timeout=600, check=True)
    python = str(tmp_path / "tools" / "sqale-mcp" / "bin" / "python")
    said = subprocess.run(
        [python, "-c", "from agent.evaluation.html_report import require_plotting; require_plotting()"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    hint = said.stderr.strip().splitlines()[-1].partition("run: ")[2]
    assert hint == f"uv tool install {wheel} --with 'matplotlib<4,>=3.8'", said.stderr
    subprocess.run([uv, *shlex.split(hint)[1:]], env=env, capture_output=True, timeout=600, check=True)
    done = subprocess.run(
        [python, "-c", "import matplotlib"], env=env, cwd=tmp_path, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
