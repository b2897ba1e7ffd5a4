"""What the verified library's tests share: a worker pool of their own per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent.sqlite import WorkerPool


@pytest.fixture
def pool() -> Iterator[WorkerPool]:
    """A worker pool for the test's databases, closed after it."""
    workers = WorkerPool()
    yield workers
    workers.close()
