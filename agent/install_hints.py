"""How to add an optional extra (`report`, `otel`) to this installation: the one text every hint uses.

sqale-mcp is not on PyPI, so asking pip for the `report` extra of `sqale-mcp` installs nothing. What works
depends on how this copy was installed, which the environment says:

- a clone installed editable (`pip install -e .`, its `direct_url.json` says so): the extra of
  that folder, with this interpreter's pip;
- pipx (`pipx_metadata.json` in the environment): `pipx inject` the extra's libraries;
- `uv tool install` (`uv-receipt.toml` in the environment): the same install again with the
  libraries added by `--with` (and what it was installed with before);
- anything else (a wheel or a folder installed with pip, a source tree on the path): the
  libraries themselves, with this interpreter's pip.

The extra's libraries and their versions come from the installed metadata (pyproject.toml's
`[project.optional-dependencies]`), so the hint never names versions of its own.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit

DISTRIBUTION = "sqale-mcp"
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


@dataclass(frozen=True)
class Installation:
    """How this copy of sqale-mcp was installed, as far as its environment says."""

    kind: Literal["clone", "pipx", "uv-tool", "pip"]
    python: str  # the interpreter sqale-mcp runs on
    source: str | None = None  # the clone's folder; pipx's package; uv's requirement for sqale-mcp
    uv_with: tuple[str, ...] = ()  # what `uv tool install --with` added before (kept)
    requirements: tuple[str, ...] = ()  # every requirement of the distribution, with its markers


def install_hint(extra: str, found: Installation | None = None) -> str:
    """The command that adds `extra`'s libraries to this installation (`found`: detected when None)."""
    how = found or installation()
    libraries = extra_libraries(extra, how.requirements)
    quoted = " ".join(shlex.quote(r) for r in libraries)
    python = shlex.quote(how.python)
    if how.kind == "clone" and how.source is not None:
        return f"{python} -m pip install -e {shlex.quote(f'{how.source}[{extra}]')}"
    if not libraries:  # no metadata to read them from
        return f"install the `{extra}` extra of sqale-mcp (its pyproject.toml lists it) for {how.python}"
    if how.kind == "pipx":
        return f"pipx inject {shlex.quote(how.source or DISTRIBUTION)} {quoted}"
    if how.kind == "uv-tool" and how.source is not None:
        names = {_name(r) for r in libraries}
        kept = [r for r in how.uv_with if _name(r) not in names]
        added = " ".join(f"--with {shlex.quote(r)}" for r in (*kept, *libraries))
        return f"uv tool install {how.source} {added}"
    return f"{python} -m pip install {quoted}"


def extra_libraries(extra: str, requirements: tuple[str, ...]) -> tuple[str, ...]:
    """The requirements (`matplotlib<4,>=3.8`) an extra adds, from the distribution's metadata."""
    out = []
    for requirement in requirements:
        spec, _, marker = requirement.partition(";")
        named = _EXTRA_MARKER.search(marker)
        if named is not None and named[1] == extra:
            out.append(spec.strip())
    return tuple(out)


def installation(prefix: Path | None = None) -> Installation:
    """How this copy was installed, from its environment (`prefix`: sys.prefix) and its metadata."""
    from importlib import metadata

    prefix = prefix or Path(sys.prefix)
    # A clone's own `sqale_mcp.egg-info` (left by the editable build) is found first from the clone's
    # folder: the installed record, which has direct_url.json, is the one that says how.
    found = sorted(
        metadata.distributions(name=DISTRIBUTION), key=lambda d: d.read_text("direct_url.json") is None
    )
    if not found:  # a source tree on the path: its folder is the clone
        return Installation("clone", sys.executable, str(Path(__file__).resolve().parents[1]))
    dist = found[0]
    requirements = tuple(dist.requires or ())
    if (prefix / "pipx_metadata.json").is_file():
        return Installation(
            "pipx", sys.executable, _pipx_package(prefix / "pipx_metadata.json"), requirements=requirements
        )
    if (prefix / "uv-receipt.toml").is_file():
        source, kept = _uv_receipt(prefix / "uv-receipt.toml")
        return Installation("uv-tool", sys.executable, source, kept, requirements)
    clone = _editable_folder(dist.read_text("direct_url.json"))
    if clone is not None:
        return Installation("clone", sys.executable, clone, requirements=requirements)
    return Installation("pip", sys.executable, requirements=requirements)


def _name(requirement: str) -> str:
    """A requirement's distribution name, normalised (`Matplotlib>=3` -> `matplotlib`)."""
    named = re.match(r"[A-Za-z0-9._-]+", requirement)
    return re.sub(r"[-_.]+", "-", named.group() if named else requirement).lower()


def _pipx_package(path: Path) -> str:
    """The package pipx installed this environment for (what `pipx inject` is given)."""
    try:
        return str(json.loads(path.read_text(encoding="utf-8"))["main_package"]["package"])
    except (OSError, ValueError, KeyError, TypeError):
        return DISTRIBUTION


def _uv_receipt(path: Path) -> tuple[str | None, tuple[str, ...]]:
    """From uv's receipt: how sqale-mcp was given to `uv tool install` (None: not known), and the
    other requirements it was installed with."""
    import tomllib

    try:
        requirements = tomllib.loads(path.read_text(encoding="utf-8"))["tool"]["requirements"]
    except (OSError, ValueError, KeyError, TypeError):
        return None, ()
    source, kept = None, []
    for item in requirements if isinstance(requirements, list) else ():
        if not isinstance(item, dict):
            continue
        name = str(item.get("name", ""))
        if name == DISTRIBUTION:
            source = _uv_source(item)
        else:
            kept.append(name + str(item.get("specifier", "")))
    return source, tuple(kept)


def _uv_source(item: dict[str, object]) -> str | None:
    """The `uv tool install` argument a receipt's requirement stands for."""
    if isinstance(item.get("editable"), str):
        return f"--editable {shlex.quote(str(item['editable']))}"
    for key, prefix in (("directory", ""), ("path", ""), ("url", ""), ("git", "git+")):
        if isinstance(item.get(key), str):
            return shlex.quote(prefix + str(item[key]))
    if "specifier" in item:
        return shlex.quote(f"{DISTRIBUTION}{item['specifier']}")
    return None


def _editable_folder(direct_url: str | None) -> str | None:
    """The folder of an editable install (PEP 610's direct_url.json), else None."""
    try:
        record = json.loads(direct_url or "")
    except ValueError:
        return None
    info = record.get("dir_info") if isinstance(record, dict) else None
    if not isinstance(info, dict) or info.get("editable") is not True:
        return None
    url = urlsplit(str(record.get("url", "")))
    return unquote(url.path) if url.scheme == "file" else None
