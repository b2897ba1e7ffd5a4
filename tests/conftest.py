"""What every test module may use: the ../shared/data location, the needs_shared marker, one
worker pool per module, asyncio for async tests; the support modules are loaded as plugins."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.sqlite import WorkerLimits, WorkerPool

pytest_plugins = (
    "tests.support.policies",
    "tests.support.fake_runtime",
    "tests.support.mcp",
    "tests.support.fixtures",
    "tests.support.hiding",
    "tests.support.sqlite_files",
    "tests.support.weird_database",
    "tests.support.music_episodes",
    "tests.support.team",
    "tests.support.telemetry",
)

# The real databases and question sets sit next to the clone (read in place, never copied).
SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SHARED_DBS = SHARED_DATA / "dbs"


def pytest_configure(config: pytest.Config) -> None:
    """Register the needs_shared marker."""
    config.addinivalue_line(
        "markers", "needs_shared(*paths): skip unless these paths exist under ../shared/data"
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a test marked needs_shared("dbs/x.sqlite", ...) when a path is absent, naming it."""
    for marker in item.iter_markers("needs_shared"):
        for relative in marker.args or ("",):
            if not (SHARED_DATA / relative).exists():
                pytest.skip(f"{SHARED_DATA / relative} is absent (../shared/data is not next to this clone)")


@pytest.fixture(autouse=True)
def _no_user_settings(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's config file, SQALE_* and OTEL_* variables stay out of every test (the commands read them)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))
    for name in [name for name in os.environ if name.startswith(("SQALE_", "OTEL_"))]:
        monkeypatch.delenv(name)  # OTEL_*: a developer's collector never receives a test's spans


@pytest.fixture
def anyio_backend() -> str:
    """Async tests (@pytest.mark.anyio) run on asyncio."""
    return "asyncio"


@pytest.fixture(scope="module")
def engine() -> Iterator[WorkerPool]:
    """One worker pool for the module's databases."""
    pool = WorkerPool(WorkerLimits(workers=2))
    yield pool
    pool.close()
