"""The npm tools .ci/run installs under .ci/node (git-ignored), with the Node.js 22 they need."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.mcp import REPO

NODE_BIN = REPO / ".ci" / "node" / "node_modules" / ".bin"


def node_tool(name: str, package: str) -> Path:
    """The path of `name` from `package` under .ci/node; the test is skipped, saying how to
    install it, when it is absent (no npm on this machine, or .ci/run not run)."""
    path = NODE_BIN / name
    if not path.is_file():
        pytest.skip(
            f"{path} is absent; install it with `{install_command(package)}` (.ci/run does when npm is present)"
        )
    return path


def install_command(package: str) -> str:
    """The npm command that puts `package` under .ci/node with Node.js 22 (named once)."""
    packages = " ".join(dict.fromkeys(("node@22", package)))
    return f"npm install --prefix .ci/node {packages}"


def node_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) with .ci/node's binaries, Node.js 22 among them,
    first on PATH."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = f"{NODE_BIN}{os.pathsep}{env.get('PATH', '')}"
    return env
