"""The progress line on stderr: questions done, accuracy so far, speed and ETA."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import Protocol, TextIO

from .records import QuestionRecord


class ProgressSink(Protocol):
    """What a run reports its progress to (ProgressLine, or a test's stand-in)."""

    def add_resumed(self, records: Iterable[QuestionRecord]) -> None:
        """Records taken from an earlier run."""
        ...

    def update(self, record: QuestionRecord) -> None:
        """A question just finished and was written."""
        ...

    def close(self) -> None:
        """The run ended (normally or not)."""
        ...


def format_duration(seconds: float) -> str:
    """`42s`, `6m10s`, `2h05m`; `?` when unknown."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def format_progress(
    *, done: int, total: int, scored: int, correct: int, single: float, samples: int, rate: float, eta: float
) -> str:
    """One progress line; `single` is the summed per-question single-sample accuracy."""
    width = len(str(total))
    parts = [f"[{done:>{width}}/{total}]"]
    if scored:
        label = "voted" if samples > 1 else "EX"
        parts.append(f"{label} {100 * correct / scored:.1f}% of {scored}")
        if samples > 1:
            parts.append(f"single {100 * single / scored:.1f}%")
    else:
        parts.append("EX -")
    parts.append(f"{rate:.2f} q/s" if rate > 0 else "- q/s")
    parts.append(f"ETA {format_duration(eta)}")
    return " · ".join(parts)


class ProgressLine:
    """Rewrites one line on a terminal; prints a line every few percent otherwise."""

    def __init__(
        self,
        total: int,
        samples: int,
        stream: TextIO,
        *,
        tty: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.samples = samples
        self.stream = stream
        self.tty = tty
        self.clock = clock
        self.started = clock()
        self.done = self.scored = self.correct = self.new = 0
        self.single = 0.0
        self._every = max(1, total // 20)

    def add_resumed(self, records: Iterable[QuestionRecord]) -> None:
        """Count records taken from an earlier run (they do not affect speed or ETA)."""
        for record in records:
            self._count(record)

    def update(self, record: QuestionRecord) -> None:
        """Count a question just finished and show the line."""
        self._count(record)
        self.new += 1
        if self.tty or self.done % self._every == 0 or self.done == self.total:
            self._show()

    def close(self) -> None:
        """End the line on a terminal."""
        if self.tty and self.new:
            self.stream.write("\n")
            self.stream.flush()

    def _count(self, record: QuestionRecord) -> None:
        self.done += 1
        if record.correct is not None:
            self.scored += 1
            self.correct += record.correct
            self.single += record.single_correct or 0.0

    def _show(self) -> None:
        elapsed = self.clock() - self.started
        rate = self.new / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else math.inf
        line = format_progress(
            done=self.done,
            total=self.total,
            scored=self.scored,
            correct=self.correct,
            single=self.single,
            samples=self.samples,
            rate=rate,
            eta=eta,
        )
        self.stream.write(f"\r{line}\x1b[K" if self.tty else line + "\n")
        self.stream.flush()
