"""The MCP Bundle: its launcher maps the extension's settings to options; the bundle built from
this repository validates and packs with the official MCPB CLI, and, unpacked and started the way
its manifest says (settings substituted by the CLI package's own code, the host's), answers over stdio."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from agent.backends.ollama_facts import DEFAULT_OLLAMA_HOST
from agent.backends.registry import DEFAULT_MODEL
from agent.errors import ConfigError
from mcp_server.packaging.bundle import BUNDLE_OPTIONS, parse_bundle_args, server_arguments
from tests.support.mcp import REPO, TOOL, server_env
from tests.support.node_tools import NODE_BIN, node_env, node_tool
from tests.support.policies import OraclePolicy
from tests.support.sqlite_files import build_db

MANIFEST = REPO / "mcp_server" / "packaging" / "manifest.json"
MCPB = "@anthropic-ai/mcpb@2.1.2"  # the version .ci/run installs
PLACEHOLDER = re.compile(r"\$\{user_config\.([^}]+)\}")
SALES_GOLD = {"How many sales are there?": "SELECT count(*) FROM sales"}


def launcher(*argv: str) -> list[str]:
    """The server options the bundle launcher makes of `argv`."""
    return server_arguments(parse_bundle_args(argv))


def test_unset_settings_mean_unset() -> None:
    """Placeholders the host left, empty values and empty lists are not settings: the demo is served."""
    assert launcher(
        "--databases",
        "${user_config.databases}",
        "--folder=${user_config.folder}",
        "--runtime=",
        "--model=  ",
        "--model-folder=${user_config.model_folder}",
        "--notes",
    ) == ["--demo"]


def test_the_model_folder_gives_the_authors_prompts() -> None:
    """The downloaded model folder becomes --reference-agent: the authors' sqale_agent.py in it."""
    assert launcher("--databases", "/d/sales.db", "--model-folder=~/models/qwen3.5-2b-grpo-synsql") == [
        "--db",
        "sales=/d/sales.db",
        "--reference-agent",
        str(Path("~/models/qwen3.5-2b-grpo-synsql").expanduser()),
    ]


def test_picked_files_become_aliases_and_notes_find_their_database() -> None:
    """File names make aliases (unsafe characters to '_', clashes numbered); notes go by name."""
    assert launcher(
        "--databases",
        "/d/My Shop.sqlite",
        "/e/My Shop.db",
        "/f/chinook.db",
        "--folder=/data",
        "--runtime=http://gpu:8080/v1",
        "--model=sibling",
        "--notes",
        "/n/chinook.txt",
    ) == [
        "--db",
        "My_Shop=/d/My Shop.sqlite",
        "--db",
        "My_Shop_2=/e/My Shop.db",
        "--db",
        "chinook=/f/chinook.db",
        "--db-dir",
        "/data",
        "--notes",
        "chinook=/n/chinook.txt",
        "--backend",
        "openai",
        "--base-url",
        "http://gpu:8080/v1",
        "--model",
        "sibling",
    ]
    assert launcher(
        "--databases", "/d/sales.db", "--notes", "/n/anything.md", "--runtime=http://127.0.0.1:11434"
    ) == [
        "--db",
        "sales=/d/sales.db",
        "--notes",
        "sales=/n/anything.md",
        "--ollama-host",
        "http://127.0.0.1:11434",
    ]
    assert launcher("--folder=/data", "--notes", "/n/sales.txt") == [
        "--db-dir",
        "/data",
        "--notes",
        "sales=/n/sales.txt",
    ]  # the server checks /data has sales.*
    with pytest.raises(ConfigError, match=r"notes file other.txt: name it after the database it describes"):
        launcher("--databases", "/d/a.db", "/d/b.db", "--notes", "/n/other.txt")


def test_manifest_passes_every_setting_the_launcher_takes() -> None:
    """Each user_config key is substituted into the arguments after its launcher option, once;
    the defaults shown are the server's; the version is the package's."""
    manifest = json.loads(MANIFEST.read_text())
    args = manifest["server"]["mcp_config"]["args"]
    used = [m for arg in args for m in PLACEHOLDER.findall(arg)]
    assert sorted(used) == sorted(manifest["user_config"]) == sorted(BUNDLE_OPTIONS)
    for key, option in BUNDLE_OPTIONS.items():
        placeholder = "${user_config." + key + "}"
        if manifest["user_config"][key].get("multiple"):
            assert args[args.index(placeholder) - 1] == option  # a list expands into its own arguments
        else:
            assert f"{option}={placeholder}" in args  # unset, it stays a placeholder inside this one
    assert manifest["user_config"]["model"]["default"] == DEFAULT_MODEL
    assert manifest["user_config"]["runtime"]["default"] == DEFAULT_OLLAMA_HOST
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert manifest["version"] == pyproject["version"]
    assert manifest["compatibility"]["runtimes"]["python"] == pyproject["requires-python"]


def host_config(manifest: Path, extension: Path, user_config: dict[str, Any]) -> dict[str, Any]:
    """mcp_config with `user_config` substituted by @anthropic-ai/mcpb's getMcpConfigForManifest,
    the code Claude Desktop loads bundles with."""
    script = """
import { getMcpConfigForManifest } from "@anthropic-ai/mcpb";
import { readFileSync } from "node:fs";
const [manifestPath, extensionPath, userConfig] = process.argv.slice(1);
const config = await getMcpConfigForManifest({
  manifest: JSON.parse(readFileSync(manifestPath, "utf8")), extensionPath, pathSeparator: "/",
  systemDirs: {HOME: process.env.HOME ?? "/"}, userConfig: JSON.parse(userConfig)});
console.log(JSON.stringify(config));
"""
    done = subprocess.run(
        [
            str(NODE_BIN / "node"),
            "--input-type=module",
            "-e",
            script,
            str(manifest),
            str(extension),
            json.dumps(user_config),
        ],
        cwd=REPO / ".ci" / "node",
        env=node_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def png_size(path: Path) -> tuple[int, int]:
    """Width and height of a PNG file (and that it is one)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.timeout(900)
async def test_the_built_bundle_answers_over_stdio(tmp_path: Path, fake_ollama: Any) -> None:
    """.ci/build-bundle validates and packs; `mcpb unpack`; the manifest's command with a test
    user_config (uv on the bundled pyproject) serves the picked files and answers a question."""
    mcpb = node_tool("mcpb", MCPB)
    uv = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))
    if uv is None:
        pytest.skip("uv is absent; `pip install uv` (.ci/run does): a `uv` bundle's host runs it")
    built = subprocess.run(
        [sys.executable, str(REPO / ".ci" / "build-bundle"), "--out", str(tmp_path / "dist")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    bundle = Path(built.stdout.strip())
    assert bundle.name == f"sqale-mcp-{json.loads(MANIFEST.read_text())['version']}.mcpb"
    extension = tmp_path / "installed extension"  # Claude Desktop's folders have spaces too
    subprocess.run(
        [str(mcpb), "unpack", str(bundle), str(extension)],
        env=node_env(),
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert sorted(p.name for p in extension.iterdir()) == [
        "LICENSE",
        "README.md",
        "agent",
        "icon.png",
        "manifest.json",
        "mcp_server",
        "pyproject.toml",
    ]
    assert png_size(extension / "icon.png") == (512, 512)

    shop = build_db(
        tmp_path / "picked" / "My Shop.sqlite",
        "CREATE TABLE sales (id INTEGER PRIMARY KEY, "
        "amount REAL); INSERT INTO sales VALUES (1, 1.5), (2, 2.5);",
    )
    other = build_db(tmp_path / "picked" / "inventory.db", "CREATE TABLE items (id INTEGER);")
    notes = tmp_path / "picked" / "inventory.txt"
    notes.write_text("items are counted at the end of each day\n")
    fake = fake_ollama(OraclePolicy(SALES_GOLD))
    config = host_config(
        extension / "manifest.json",
        extension,
        {
            "databases": [str(shop), str(other)],
            "runtime": fake.url,
            "model": DEFAULT_MODEL,
            "notes": [str(notes)],
        },
    )
    assert config["command"] == "uv"
    env = {
        **server_env(tmp_path),
        **config.get("env", {}),
        # The host brings Python; here it is this interpreter, and uv downloads no other.
        "UV_PYTHON": sys.executable,
        "UV_PYTHON_DOWNLOADS": "never",
        # Packages come from the usual cache: a second run installs without the network.
        "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR", str(Path.home() / ".cache" / "uv")),
    }
    params = StdioServerParameters(command=uv, args=config["args"], env=env, cwd=tmp_path)
    with (tmp_path / "stderr.txt").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            (tool,) = (await client.list_tools()).tools
            result = await client.call_tool(
                TOOL, {"question": "How many sales are there?", "database": "My_Shop"}
            )
    assert tool.input_schema["properties"]["database"]["enum"] == ["My_Shop", "inventory"]
    assert "- inventory: 1 table (items); has notes" in (tool.description or "")
    assert (result.is_error, result.structured_content["rows"]) == (False, [[2]]), result
