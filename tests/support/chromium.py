"""Headless Chromium driven over the DevTools protocol, for tests of pages we generate.

No Node: Chromium listens on a loopback port it picks itself (written to DevToolsActivePort in
its profile folder), and we talk JSON over one websocket to the first page. Console errors,
uncaught exceptions and browser log errors (a Content-Security-Policy violation, a failed
load) are collected as they arrive. Import as `from tests.support.chromium import Chromium, find_chromium`.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

NAMES = ("chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)
START_TIMEOUT = 60.0


def find_chromium() -> str | None:
    """The path of a Chromium-like browser on PATH, or None."""
    return next((path for name in NAMES if (path := shutil.which(name))), None)


class Chromium:
    """One headless browser with one page; use as a context manager."""

    def __init__(self, executable: str, profile: Path, extra_flags: tuple[str, ...] = ()) -> None:
        from websockets.sync.client import connect

        profile.mkdir(parents=True, exist_ok=True)
        self._log = (profile / "chromium.log").open("wb")
        self.process = subprocess.Popen(
            [executable, *FLAGS, *extra_flags, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
        )
        self.errors: list[str] = []
        self._events: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._closing = contextlib.ExitStack()
        try:
            port = self._port(profile / "DevToolsActivePort")
            self.socket = self._closing.enter_context(
                connect(self._page_socket(port), max_size=None, open_timeout=START_TIMEOUT)
            )
            for domain in ("Page", "Runtime", "Log"):
                self.send(f"{domain}.enable")
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _port(self, active_port: Path) -> int:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.process.returncode}; see {self._log.name}")
            lines = active_port.read_text().splitlines() if active_port.exists() else []
            if lines and lines[0].isdigit():
                return int(lines[0])
            time.sleep(0.05)
        raise TimeoutError(f"chromium wrote no {active_port.name} within {START_TIMEOUT:.0f} s")

    @staticmethod
    def _page_socket(port: int) -> str:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as response:
                pages = [t for t in json.load(response) if t.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.05)
        raise TimeoutError("chromium opened no page")

    def send(self, method: str, timeout: float = 60.0, **params: Any) -> dict[str, Any]:
        """Call a DevTools method and return its result; events meanwhile are kept."""
        message_id = next(self._ids)
        self.socket.send(json.dumps({"id": message_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self.socket.recv(timeout=max(0.01, deadline - time.monotonic())))
            if message.get("id") == message_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._note(message)

    def _note(self, event: dict[str, Any]) -> None:
        self._events.append(event)
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            thrown = details.get("exception", {}).get("description") or details["text"]
            self.errors.append(f"exception: {thrown}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append(
                "console: "
                + " ".join(str(a.get("value", a.get("description"))) for a in params.get("args", []))
            )
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"log: {entry.get('text')}" + (f" ({entry['url']})" if entry.get("url") else ""))

    def wait_for(self, method: str, timeout: float = 60.0) -> dict[str, Any]:
        """The first event named `method` since the last wait (waiting for it if needed)."""
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self._events):
                if event.get("method") == method:
                    del self._events[: i + 1]
                    return event.get("params", {})
            self._events.clear()
            self._note(json.loads(self.socket.recv(timeout=max(0.01, deadline - time.monotonic()))))

    def open(self, url: str) -> None:
        """Navigate and wait for the load event."""
        self._events.clear()
        self.send("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str, context_id: int | None = None) -> Any:
        """The JSON value of a JavaScript expression in the page (or in the execution context given)."""
        where = {} if context_id is None else {"contextId": context_id}
        result = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True, **where
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """A real mouse click in the middle of the first element matching `selector`."""
        box = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
            "e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect(); "
            "return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        self.mouse_click(box[0], box[1])

    def mouse_click(self, x: float, y: float) -> None:
        """A real left click at (x, y) of the viewport (the pointer moves there first)."""
        self.send("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def poll(self, probe: Callable[[], Any], timeout: float = 30.0) -> Any:
        """The first truthy value `probe` returns, asked every 50 ms; TimeoutError after `timeout`."""
        deadline = time.monotonic() + timeout
        while not (value := probe()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing came within {timeout:g} s")
            time.sleep(0.05)
        return value

    def type_into(self, selector: str, text: str) -> None:
        """Focus an input and type `text` as a user would (input events fire)."""
        self.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")
        self.send("Input.insertText", text=text)

    def screenshot(self, path: Path, *, width: int = 1280, height: int = 1600, dark: bool = False) -> Path:
        """A PNG of the viewport, in light or dark colour scheme."""
        self.send(
            "Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False
        )
        self.send(
            "Emulation.setEmulatedMedia",
            features=[{"name": "prefers-color-scheme", "value": "dark" if dark else "light"}],
        )
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        """Close the socket and end the browser process."""
        self._closing.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
