"""`sqale-mcp` builds its server with the cyclic garbage collector paused, then resumes it as it was."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

import mcp_server.__main__ as entry


@pytest.fixture(autouse=True)
def collector_as_it_was() -> Iterator[None]:
    """Each test leaves the collector enabled and nothing frozen, as pytest had it."""
    yield
    gc.unfreeze()
    gc.enable()


class RecordingServer:
    """A built server whose run() notes whether the collector runs and what start-up froze."""

    def __init__(self) -> None:
        self.seen: list[tuple[bool, bool]] = []

    def run(self) -> None:
        """Serve nothing; remember (collector enabled, anything frozen)."""
        self.seen.append((gc.isenabled(), gc.get_freeze_count() > 0))


def test_the_collector_is_paused_while_building_and_runs_while_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server is built without collection; it serves with collection on and start-up frozen."""
    server = RecordingServer()
    building: list[bool] = []

    def checked_server(arguments: Sequence[str]) -> RecordingServer:
        building.append(gc.isenabled())
        return server

    monkeypatch.setattr(entry, "_checked_server", checked_server)
    assert entry.main(["--demo"]) == 0
    assert (building, server.seen, gc.isenabled()) == ([False], [(True, True)], True)


def test_a_wrong_setting_leaves_the_collector_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 on a wrong setting resumes collection like a served run does."""
    assert entry.main(["--db", f"x={tmp_path / 'missing.sqlite'}"]) == 2
    assert capsys.readouterr().err.startswith("sqale-mcp: ")
    assert gc.isenabled()


def test_a_collector_paused_by_the_caller_stays_paused() -> None:
    """collector_paused() resumes collection only when it was running before."""
    gc.disable()
    with entry.collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()
