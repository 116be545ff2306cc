"""Regenerate the README's screenshots (docs/images/) with headless Chromium.

Starts the Dagster webserver over this checkout's instance (`workspace.yaml`, DAGSTER_HOME = the
repository) and the MLflow UI over the local store, both on 127.0.0.1, drives Chromium through
the DevTools protocol (to open a plot's markdown the way a person clicks it), writes the PNGs and
stops everything it started by PID. Run `make demo` first so there is something to look at.

    .venv/bin/python docs/screenshots.py [--chromium /usr/bin/chromium]

Needs the Debian `chromium` package (`apt-get install chromium`).
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack, contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
IMAGES = REPO / "docs" / "images"
DAGSTER_PORT, MLFLOW_PORT, DEVTOOLS_PORT = 3000, 5000, 9333


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
def process(args: list[str], log: Path, env: dict | None = None):
    """A server in its own process group, stopped (group-wide, by its PID) on exit."""
    with open(log, "w") as out:
        proc = subprocess.Popen(args, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env,
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--asset", default="knn_estimator", help="the Dagster asset page to show")
    parser.add_argument("--plot", default="quality_cost_plot", help="its metadata entry holding a plot")
    args = parser.parse_args()
    if not Path(args.chromium).exists():
        print(f"error: no Chromium at {args.chromium} (apt-get install chromium)", file=sys.stderr)
        return 1
    tracking = os.environ.get("MLFLOW_TRACKING_URI", f"sqlite:///{REPO / '.state' / 'mlflow.db'}")
    env = {**os.environ, "DAGSTER_HOME": str(REPO), "HF_HUB_OFFLINE": "1", "MLFLOW_TRACKING_URI": tracking}
    bin_dir = Path(sys.executable).parent
    IMAGES.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="routeforge-shots-")))
        stack.enter_context(process([str(bin_dir / "dagster-webserver"), "-w", "workspace.yaml", "-h", "127.0.0.1",
                                     "-p", str(DAGSTER_PORT)], logs / "dagster.log", env))
        stack.enter_context(process([str(bin_dir / "mlflow"), "ui", "--backend-store-uri", tracking, "--host",
                                     "127.0.0.1", "--port", str(MLFLOW_PORT)], logs / "mlflow.log", env))
        stack.enter_context(process([args.chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
                                     "--hide-scrollbars", "--window-size=1600,1150",
                                     f"--remote-debugging-port={DEVTOOLS_PORT}", "--remote-debugging-address=127.0.0.1",
                                     f"--user-data-dir={logs / 'chromium'}", "about:blank"], logs / "chromium.log"))
        for url in (f"http://127.0.0.1:{DAGSTER_PORT}/server_info", f"http://127.0.0.1:{MLFLOW_PORT}/health",
                    f"http://127.0.0.1:{DEVTOOLS_PORT}/json/version"):
            wait_for(url)
        with urllib.request.urlopen(f"http://127.0.0.1:{DEVTOOLS_PORT}/json/list", timeout=10) as r:
            target = next(t for t in json.load(r) if t["type"] == "page")
        page = Page(target["webSocketDebuggerUrl"])

        # Dagster: the asset's latest materialization, its plot opened from the metadata table
        page.open(f"http://127.0.0.1:{DAGSTER_PORT}/assets/{args.asset}", args.plot)
        page.click_text("[Show Markdown]", near=args.plot)
        page.screenshot(IMAGES / "dagster_asset_plot.png")

        # MLflow: the newest pipeline run (a parent run) with its child runs expanded
        import mlflow

        mlflow.set_tracking_uri(tracking)
        parent = mlflow.search_runs(search_all_experiments=True, filter_string="tags.`routeforge.role` = 'pipeline'",
                                    order_by=["start_time DESC"], max_results=1, output_format="list")[0]
        experiment = parent.info.experiment_id
        from routeforge.registry.store import ensure_experiment

        ensure_experiment(tracking, mlflow.get_experiment(experiment).name, None)  # the model-training view
        page.open(f"http://127.0.0.1:{MLFLOW_PORT}/#/experiments/{experiment}/runs", parent.info.run_name)
        page.js(f"""(() => {{
            const row = [...document.querySelectorAll('[role=row], tr')]
                .find(r => r.innerText.includes({json.dumps(parent.info.run_name)}));
            const toggle = row && row.querySelector('button');
            if (toggle) toggle.click(); }})()""")
        time.sleep(3.0)
        page.screenshot(IMAGES / "mlflow_pipeline_run.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
