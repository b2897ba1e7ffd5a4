"""How a cancellation reaches a running statement: the caller's token and the page the worker reads."""

from __future__ import annotations

import mmap
import struct
import threading
import time
from collections.abc import Callable


class CancelToken:
    """Thread-safe cancellation signal passed from an async caller to a blocking query."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self.cancelled_at: float | None = None

    def cancel(self) -> None:
        """Ask the running query to stop."""
        with self._lock:
            if self.cancelled_at is None:
                self.cancelled_at = time.monotonic()
            callbacks = list(self._callbacks)
        for cb in callbacks:
            cb()

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Register a callback (run at once if already cancelled); returns its remover."""
        with self._lock:
            self._callbacks.append(callback)
            already = self.cancelled_at is not None
        if already:
            callback()

        def remove() -> None:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)

        return remove


class CancelCell:
    """An 8-byte shared page holding the id of the request to cancel (no signal races)."""

    def __init__(self, fd: int) -> None:
        self._map = mmap.mmap(fd, 8)
        self.current = 0

    def request(self, request_id: int) -> None:
        """Ask the worker to stop the request `request_id` (the parent's side)."""
        struct.pack_into("<q", self._map, 0, request_id)

    @property
    def value(self) -> bool:
        """True when the request the worker is running is the one to cancel (the worker's side)."""
        return struct.unpack_from("<q", self._map, 0)[0] == self.current
