"""How quick and how narrow the `routeforge` CLI is on the demo's state (issue 62, item 6).

Needs a `make demo` state (default `.state`, or `--state`). Measures, each in fresh processes
(median of `--repeats`):

- an argument error (`bundle predict models:/… --bogus`): said before any store is touched;
- a warm `bundle predict models:/routeforge-demo-router@champion` (the bundle already in the cache)
  on the local SQLite store, and through an `mlflow server` on 127.0.0.1 over the same store
  (the alias and key read over REST, no MLflow import);
- the widest line each of README.md's commands prints on a terminal (`$ROUTEFORGE_WIDE=0`: the narrow
  lines a terminal gets by default) and with `routeforge --wide`.

Writes `benchmarks/results/cli_speed/cli_speed.json`.

    .venv/bin/python -m benchmarks.cli_speed
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from routeforge.generation.local_server import free_port, wait_healthy

from benchmarks.common import DATA, REPO, results_dir
from benchmarks.common import parser as bench_parser
from tools.readme import readme_console_commands

BIN = Path(sys.executable).parent
URI = "models:/routeforge-demo-router@champion"


def timed(argv: list[str], env: dict[str, str], expect: int = 0) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    elapsed = time.perf_counter() - start
    if done.returncode != expect:
        raise RuntimeError(f"{' '.join(argv[:4])} …: exit {done.returncode}\n{done.stderr[-2000:]}")
    return elapsed, done.stdout + done.stderr


def median_s(argv: list[str], env: dict[str, str], repeats: int, expect: int = 0) -> float:
    return round(statistics.median(timed(argv, env, expect)[0] for _ in range(repeats)), 3)


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--state", default=str(REPO / ".state"), help="a state folder `make demo` filled")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    repeats = 2 if args.quick else args.repeats
    state = Path(args.state).resolve()
    if not (state / "mlflow.db").is_file():
        raise SystemExit(f"no demo registry at {state / 'mlflow.db'}: run `make demo` first")
    env = {**os.environ, "ROUTEFORGE_STATE": str(state), "HF_HUB_OFFLINE": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    routeforge = str(BIN / "routeforge")
    predict = [routeforge, "bundle", "predict", URI, "What is 15 plus 27?"]
    out: dict = {"machine": "2-core CPU", "repeats": repeats}
    out["argument_error_s"] = median_s([routeforge, "bundle", "predict", URI, "--bogus"], env, repeats, expect=2)
    timed(predict, env)  # fills the cache
    out["warm_predict_local_store_s"] = median_s(predict, env, repeats)

    port = free_port()
    log = state / "cli_speed_server.log"
    server = subprocess.Popen(
        [str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{state / 'mlflow.db'}"],
        stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_healthy(server, f"http://127.0.0.1:{port}/health", log, timeout_s=120)
        served = {**env, "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{port}"}
        timed(predict, served)
        out["warm_predict_mlflow_server_s"] = median_s(predict, served, repeats)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)

    widths = {}
    for command, _ in readme_console_commands():
        argv = shlex.split(command.replace("../shared/data", str(DATA)), comments=True)
        argv[0] = str(BIN / Path(argv[0]).name)
        _, narrow = timed(argv, {**env, "ROUTEFORGE_WIDE": "0"})  # what a terminal gets
        _, wide = timed([argv[0], "--wide", *argv[1:]], env)
        name = " ".join(argv[1:3])
        widths[name] = {"default": max(map(len, narrow.splitlines())), "wide": max(map(len, wide.splitlines()))}
    out["widest_line"] = widths
    path = results_dir("cli_speed") / "cli_speed.json"
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
