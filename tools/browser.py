"""Headless Chromium driven over the DevTools protocol, for the browser tests and docs/screenshots.py.

`chromium(...)` starts Debian's `chromium` on loopback in its own process group (stopped by its PID
on exit) and yields a `Page`: navigate, wait for text, click, read, screenshot. The flags are the
ones this machine's closed network needs (no background networking, no first-run checks).
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def wait_for(url: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout_s:.0f} s")


@contextmanager
def process(args: list[str], log: Path, env: dict | None = None, cwd: Path | None = None):
    """A server in its own process group, stopped (group-wide, by its PID) on exit."""
    with open(log, "w") as out:
        proc = subprocess.Popen(args, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


class Page:
    """One Chromium tab over the DevTools protocol (websockets' synchronous client)."""

    def __init__(self, ws_url: str):
        from websockets.sync.client import connect

        self.ws = connect(ws_url, max_size=64 * 1024 * 1024, open_timeout=30)
        self.ids = itertools.count(1)

    def call(self, method: str, **params):
        msg_id = next(self.ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
        raise TimeoutError(method)

    def js(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result.get("result", {}).get("value")

    def open(self, url: str, ready_text: str, timeout_s: float = 60.0) -> None:
        """Navigate and wait until `ready_text` is on the page (single-page apps render late)."""
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.js(f"document.body && document.body.innerText.includes({json.dumps(ready_text)})"):
                time.sleep(1.5)  # let images and fonts settle
                return
            time.sleep(0.5)
        self.screenshot(Path(tempfile.gettempdir()) / "routeforge-shot-timeout.png")
        raise TimeoutError(f"{url}: {ready_text!r} never appeared (page as it was: "
                           f"{Path(tempfile.gettempdir()) / 'routeforge-shot-timeout.png'})")

    def click_text(self, text: str, near: str | None = None) -> None:
        """Click the innermost element reading `text` (in the table row that mentions `near`)."""
        found = self.js(f"""(() => {{
            const rows = {json.dumps(near)} ? [...document.querySelectorAll('tr')]
                .filter(r => r.innerText.includes({json.dumps(near)})) : [document.body];
            for (const row of rows) {{
                const hit = [...row.querySelectorAll('*')].reverse()
                    .find(e => e.innerText && e.innerText.trim() === {json.dumps(text)});
                if (hit) {{ hit.click(); return true; }}
            }}
            return false; }})()""")
        if not found:
            raise LookupError(f"no element reading {text!r}" + (f" near {near!r}" if near else ""))
        time.sleep(2.0)

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        print(f"wrote {path}")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def chromium(folder: Path, executable: str = CHROMIUM, window: str = "1600,1150") -> Iterator[Page]:
    """Headless Chromium on loopback with a new profile under `folder`; yields its first tab."""
    port = free_port()
    with ExitStack() as stack:
        stack.enter_context(process([executable, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                                     "--no-first-run", "--disable-background-networking", "--disable-component-update",
                                     "--disable-sync", "--hide-scrollbars", f"--window-size={window}",
                                     f"--remote-debugging-port={port}", "--remote-debugging-address=127.0.0.1",
                                     f"--user-data-dir={folder / 'chromium-profile'}", "about:blank"],
                                    folder / "chromium.log"))
        wait_for(f"http://127.0.0.1:{port}/json/version", timeout_s=60)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            target = next(t for t in json.load(r) if t["type"] == "page")
        page = Page(target["webSocketDebuggerUrl"])
        try:
            yield page
        finally:
            page.ws.close()
