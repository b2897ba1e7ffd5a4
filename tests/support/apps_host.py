"""An MCP Apps host in headless Chromium, built on the official host bridge (ext-apps' AppBridge).

The page `host.html` puts a view's HTML in a sandboxed iframe (scripts only: an opaque origin,
the host CSP the ext-apps spec prescribes when a resource declares none, the permissions the
resource asks for) and talks to it through `AppBridge` and `PostMessageTransport` from
`@modelcontextprotocol/ext-apps`, bundled for the browser by esbuild. Both npm packages come
from `.ci/node` (`.ci/run` installs them); tests skip with the reason when they are absent.
Tool calls the view makes through the host are recorded and answered from `host.results`.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.support.chromium import Chromium
from tests.support.mcp import REPO

NODE_MODULES = REPO / ".ci" / "node" / "node_modules"
EXT_APPS = NODE_MODULES / "@modelcontextprotocol" / "ext-apps"
ESBUILD = NODE_MODULES / ".bin" / "esbuild"
INSTALL_HINT = (
    "npm install --prefix .ci/node @modelcontextprotocol/ext-apps@2.0.4 esbuild@0.27.7 (as .ci/run does)"
)
# What the spec tells a host to enforce when a UI resource declares no `_meta.ui.csp`.
HOST_CSP = (
    "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; media-src 'self' data:; connect-src 'none'"
)
HOST_INFO = {"name": "sqale test host", "version": "1.0.0"}
# What the host offers the view: tool calls to its server, context updates, logging.
HOST_CAPABILITIES = {"serverTools": {}, "updateModelContext": {"text": {}}, "logging": {}}

HOST_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>host</title>
<style>
  body { margin: 0; padding: 16px; background: #f4f3ef; font: 14px sans-serif; }
  body.dark { background: #262624; }
  iframe { display: block; width: 100%; border: 1px solid #ccc; border-radius: 8px; height: 80px; }
</style>
<script src="host-bridge.js"></script>
</head><body>
<script>
window.host = {
  calls: [], sizes: [], contextUpdates: [], logs: [], results: {}, initialized: false,
  async show(html, input, result, context, csp) {
    const iframe = document.createElement("iframe");
    iframe.setAttribute("sandbox", "allow-scripts");
    iframe.setAttribute("allow", "clipboard-write");
    const meta = `<meta http-equiv="Content-Security-Policy" content="${csp}">`;
    iframe.srcdoc = html.replace(/<head>/i, `<head>${meta}`);
    document.body.replaceChildren(iframe);
    const bridge = new ExtApps.AppBridge(null, HOST_INFO, HOST_CAPABILITIES, { hostContext: context });
    bridge.oncalltool = async (params) => {
      host.calls.push(params);
      const answer = host.results[params.name];
      if (!answer) throw new Error(`no tool ${params.name}`);
      return answer;
    };
    bridge.onupdatemodelcontext = async (params) => { host.contextUpdates.push(params); return {}; };
    bridge.onloggingmessage = (params) => host.logs.push(params);
    bridge.onrequestdisplaymode = async ({ mode }) => {
      bridge.sendHostContextChange({ displayMode: mode });
      return { mode };
    };
    bridge.onsizechange = ({ height }) => {
      if (height !== undefined) { host.sizes.push(height); iframe.style.height = `${height}px`; }
    };
    const initialized = new Promise((resolve) => { bridge.oninitialized = resolve; });
    await bridge.connect(new ExtApps.PostMessageTransport(iframe.contentWindow, iframe.contentWindow));
    await initialized;
    host.initialized = true;
    host.bridge = bridge;
    await bridge.sendToolInput({ arguments: input });
    if (result) await bridge.sendToolResult(result);
  },
  theme(theme) {
    document.body.classList.toggle("dark", theme === "dark");
    host.bridge.sendHostContextChange({ theme });
  },
};
</script>
</body></html>
"""


def missing_tools() -> str | None:
    """Why the host cannot be built here (a sentence), or None when it can."""
    if not (EXT_APPS / "package.json").is_file():
        return f"@modelcontextprotocol/ext-apps is not installed: {INSTALL_HINT}"
    if not ESBUILD.is_file():
        return f"esbuild is not installed: {INSTALL_HINT}"
    return None


def write_host(folder: Path) -> Path:
    """host.html and its bundled bridge (AppBridge, PostMessageTransport) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    entry = 'export { AppBridge, PostMessageTransport } from "@modelcontextprotocol/ext-apps/app-bridge";\n'
    subprocess.run(
        [
            str(ESBUILD),
            "--bundle",
            "--format=iife",
            "--global-name=ExtApps",
            "--platform=browser",
            "--log-level=warning",
            f"--outfile={folder / 'host-bridge.js'}",
        ],
        input=entry,
        text=True,
        cwd=NODE_MODULES.parent,
        check=True,
        timeout=120,
    )
    page = HOST_PAGE.replace("HOST_INFO", json.dumps(HOST_INFO)).replace(
        "HOST_CAPABILITIES", json.dumps(HOST_CAPABILITIES)
    )
    (folder / "host.html").write_text(page, encoding="utf-8")
    return folder / "host.html"


class AppsHost:
    """The host page in a browser, and the view it shows: evaluate, click and type inside it."""

    def __init__(self, browser: Chromium, page: Path) -> None:
        self.browser = browser
        self.page = page
        self._view_context: int | None = None

    def show(
        self,
        html: str,
        tool_input: dict[str, Any],
        result: dict[str, Any] | None,
        context: dict[str, Any] | None = None,
    ) -> None:
        """Open the host page and show `html` with the tool's input and result, as a host does."""
        # A chat-column width, tall enough that every button is on screen for a real click.
        self.browser.send(
            "Emulation.setDeviceMetricsOverride", width=760, height=2400, deviceScaleFactor=1, mobile=False
        )
        self.browser.open(self.page.as_uri())
        # What the previous page logged reaches us only now, while this one opens: not this view's.
        self.browser.errors.clear()
        self.browser.evaluate(
            f"host.show({json.dumps(html)}, {json.dumps(tool_input)}, {json.dumps(result)}, "
            f"{json.dumps(context or {'theme': 'light'})}, {json.dumps(HOST_CSP)})"
        )
        self._view_context = None

    def host(self, expression: str) -> Any:
        """A JavaScript expression in the host page."""
        return self.browser.evaluate(expression)

    def view(self, expression: str) -> Any:
        """A JavaScript expression in the view's document (an isolated world: its DOM, not its globals)."""
        if self._view_context is None:
            self._view_context = view_context(self.browser)
        return self.browser.evaluate(expression, context_id=self._view_context)

    def wait_view(self, expression: str, timeout: float = 30.0) -> Any:
        """The first truthy value of `expression` in the view, polled (an element counts as true)."""
        probe = f"(() => {{ const value = ({expression}); return value instanceof Node ? true : value; }})()"
        return self.browser.poll(lambda: self.view(probe), timeout=timeout)

    def click(self, selector: str) -> None:
        """A real mouse click on the first element matching `selector` in the view.

        Waits until the element's middle shows through the iframe: the host sizes the frame only
        when the view reports its height (the tall test viewport then shows all of it).
        """
        target = json.dumps(selector)

        def point() -> list[float] | None:
            box = self.view(
                f"(() => {{ const e = document.querySelector({target}); "
                "const r = e.getBoundingClientRect(); "
                "const x = r.x + r.width / 2, y = r.y + r.height / 2; "
                "return e.contains(document.elementFromPoint(x, y)) && [x, y]; })()"
            )
            return box and self.host(
                "(() => { const f = document.querySelector('iframe'), r = f.getBoundingClientRect(); "
                f"const x = r.x + 1 + {box[0]}, y = r.y + 1 + {box[1]}; "  # + the iframe's border
                "return document.elementFromPoint(x, y) === f && [x, y]; })()"
            )

        x, y = self.browser.poll(point)
        self.browser.mouse_click(x, y)

    def type_into(self, selector: str, text: str) -> None:
        """Click an input of the view and type `text` into it."""
        self.click(selector)
        self.browser.send("Input.insertText", text=text)

    def screenshot(self, path: Path, *, width: int = 760) -> Path:
        """A PNG of the host page as tall as the view."""
        self.browser.send(
            "Emulation.setDeviceMetricsOverride", width=width, height=400, deviceScaleFactor=1, mobile=False
        )
        height = self.host("document.documentElement.scrollHeight")
        return self.browser.screenshot(path, width=width, height=min(int(height) + 2, 3000))


def view_context(browser: Chromium, title: str = "sqale-mcp answer") -> int:
    """An execution context in the frame (at any depth) whose document is the answer view."""
    frames, found = [browser.send("Page.getFrameTree")["frameTree"]], []
    while frames:
        frame = frames.pop()
        frames.extend(frame.get("childFrames", []))
        context = browser.send("Page.createIsolatedWorld", frameId=frame["frame"]["id"], worldName="test")[
            "executionContextId"
        ]
        if browser.evaluate(f"document.title === {json.dumps(title)}", context_id=context):
            found.append(context)
    assert len(found) == 1, f"{len(found)} frames hold the view"
    return found[0]


def chromium_flags() -> tuple[str, ...]:
    """Sandboxed frames stay in the page's process (their console reaches the page's session), and
    no name resolves but loopback's, so nothing a page asks for leaves the machine."""
    return (
        "--disable-site-isolation-trials",
        "--disable-features=IsolateSandboxedIframes,site-per-process",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost",
    )
