"""Regenerate the README's screenshots (docs/images/) with headless Chromium.

Starts the Dagster webserver over this checkout's instance (`workspace.yaml`, DAGSTER_HOME = the
state folder's `dagster/`, where `make demo` records its runs) and the MLflow UI over the local
store, both on 127.0.0.1, drives Chromium through the DevTools protocol (to open a plot's markdown
the way a person clicks it), writes the PNGs and stops everything it started by PID. Run
`make demo` first so there is something to look at.

    .venv/bin/python docs/screenshots.py [--chromium /usr/bin/chromium]

Needs the Debian `chromium` package (`apt-get install chromium`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run as a script: tools/ is the repository's, not an installed package

from tools.browser import CHROMIUM, chromium, process, wait_for  # noqa: E402

IMAGES = REPO / "docs" / "images"
DAGSTER_PORT, MLFLOW_PORT = 3000, 5000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default=CHROMIUM)
    parser.add_argument("--asset", default="knn_estimator", help="the Dagster asset page to show")
    parser.add_argument("--plot", default="quality_cost_plot", help="its metadata entry holding a plot")
    parser.add_argument("--job", default="train_and_register", help="the Dagster job page to show")
    parser.add_argument("--child-run", default="router-selection",
                        help="the MLflow child run to show (the end of its name, after the fleet's)")
    args = parser.parse_args()
    if not Path(args.chromium).exists():
        print(f"error: no Chromium at {args.chromium} (apt-get install chromium)", file=sys.stderr)
        return 1
    tracking = os.environ.get("MLFLOW_TRACKING_URI", f"sqlite:///{REPO / '.state' / 'mlflow.db'}")
    home = Path(os.environ.get("DAGSTER_HOME") or REPO / ".state" / "dagster")
    env = {**os.environ, "DAGSTER_HOME": str(home), "HF_HUB_OFFLINE": "1", "MLFLOW_TRACKING_URI": tracking}
    bin_dir = Path(sys.executable).parent
    IMAGES.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="routeforge-shots-")))
        stack.enter_context(process([str(bin_dir / "dagster-webserver"), "-w", str(REPO / "workspace.yaml"), "-h",
                                     "127.0.0.1", "-p", str(DAGSTER_PORT)], logs / "dagster.log", env, cwd=home))
        stack.enter_context(process([str(bin_dir / "mlflow"), "ui", "--backend-store-uri", tracking, "--host",
                                     "127.0.0.1", "--port", str(MLFLOW_PORT)], logs / "mlflow.log", env, cwd=REPO))
        for url in (f"http://127.0.0.1:{DAGSTER_PORT}/server_info", f"http://127.0.0.1:{MLFLOW_PORT}/health"):
            wait_for(url)
        page = stack.enter_context(chromium(logs, args.chromium))

        # Dagster: the asset's latest materialization, its plot opened from the metadata table
        page.open(f"http://127.0.0.1:{DAGSTER_PORT}/assets/{args.asset}", args.plot)
        page.click_text("[Show Markdown]", near=args.plot)
        page.screenshot(IMAGES / "dagster_asset_plot.png")

        # Dagster: the lineage `make ui` links to, every stage's group open
        from routeforge.pipelines.ui import lineage_url

        page.open(lineage_url(f"http://127.0.0.1:{DAGSTER_PORT}"), "release_gate")
        page.screenshot(IMAGES / "dagster_lineage.png")

        # Dagster: the job's page lists the runs `make demo` launched
        page.open(f"http://127.0.0.1:{DAGSTER_PORT}/locations/routeforge/jobs/{args.job}/runs", "Success")
        page.screenshot(IMAGES / "dagster_job_runs.png")

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

        # MLflow: one child run's overview: its duration (as long as the Dagster step) and params
        child = mlflow.search_runs([experiment], filter_string=f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'",
                                   output_format="list", max_results=100)
        step = next(r for r in child if r.info.run_name.endswith(args.child_run))
        # a taller page, so its duration, dataset, metrics and parameters all show in one picture
        page.call("Emulation.setDeviceMetricsOverride", width=1600, height=2300, deviceScaleFactor=1, mobile=False)
        page.open(f"http://127.0.0.1:{MLFLOW_PORT}/#/experiments/{experiment}/runs/{step.info.run_id}", "Parameters")
        page.screenshot(IMAGES / "mlflow_child_run.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
