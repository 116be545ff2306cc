"""What a registered demo version costs to store and to deliver, through a real `mlflow server`.

Issue 50, item 6. Runs the demo pipeline (fresh state) with its registry on an `mlflow server` on
127.0.0.1 (SQLite backend, proxied artifact store), adds a second version with `routeforge bundle
add-model` (a new model from labels: the encoder and most components do not change), then measures:

- the bytes each version adds to the server's artifact store (the shared-components store included);
- a router service's downloads, into its own empty cache: the first version, then moving to the
  second (bytes by `du`, which counts a hard-linked file once);
- `routeforge bundle predict models:/…` in a fresh process: cold cache, warm cache;
- `mlflow.pyfunc.load_model` through the server in a fresh process: cold cache, warm cache.

Writes `benchmarks/results/bundle_delivery/bundle_delivery.json`.

    .venv/bin/python -m benchmarks.bundle_delivery
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.common import parser as bench_parser
from benchmarks.common import results_dir

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def du(path: Path) -> int:
    """Bytes on disk under `path`, each hard-linked file once (GNU du's apparent size)."""
    if not path.exists():
        return 0
    return int(subprocess.check_output(["du", "-sb", str(path)]).split()[0])


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} …: exit {done.returncode}\n{done.stderr[-3000:]}")
    return elapsed, done.stdout


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--out", default=str(results_dir("bundle_delivery") / "bundle_delivery.json"))
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="routeforge-delivery-"))
    port = free_port()
    server_url = f"http://127.0.0.1:{port}"
    artifacts = work / "server-artifacts"
    log = open(work / "server.log", "w")
    server = subprocess.Popen(
        [str(BIN / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{work / 'server.db'}", "--artifacts-destination", str(artifacts)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # its workers stop with it (killpg)
    config = REPO / "configs" / f".bench-delivery-{os.getpid()}.yaml"  # beside demo.yaml: its relative paths hold
    try:
        import urllib.request

        for _ in range(240):  # bounded: two minutes
            try:
                urllib.request.urlopen(f"{server_url}/health", timeout=2).close()
                break
            except OSError:
                time.sleep(0.5)
        else:
            raise RuntimeError(f"mlflow server did not answer; see {work / 'server.log'}")
        fleet = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
        fleet["registry"]["tracking_uri"] = server_url
        fleet["registry"].pop("artifact_location", None)
        config.write_text(yaml.safe_dump(fleet, sort_keys=False))
        state = work / "state"
        env = {**os.environ, "ROUTEFORGE_STATE": str(state), "MLFLOW_TRACKING_URI": server_url,
               "ROUTEFORGE_CACHE": str(work / "pipeline-cache"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
        env.pop("DAGSTER_HOME", None)
        print("demo pipeline → the mlflow server …", flush=True)
        demo_s, _ = timed([sys.executable, "-m", "routeforge.pipelines.run", str(config)],
                          env)
        name, experiment = fleet["registry"]["model_name"], fleet["registry"]["experiment"]
        after_v1 = du(artifacts)
        prompts = REPO / "configs" / "data" / "demo_prompts.jsonl"
        rows = [json.loads(line) for line in prompts.read_text().splitlines()]
        labels = work / "labels.csv"
        labels.write_text("text,score,output_tokens\n" + "".join(
            f"\"{r['prompt']}\",{1.0 if r['task'] == 'math' else 0.0},30\n" for r in rows))
        key = state / "demo" / "keys" / "bundle-signing.key"
        print("add-model → version 2 …", flush=True)
        timed([str(BIN / "routeforge"), "bundle", "add-model", name, "--model", "tiny-math", "--labels", str(labels),
               "--experiment", experiment, "--signing-key", str(key), "--public-key", f"{key}.pub", "--json"], env)
        after_v2 = du(artifacts)

        service = {**env, "ROUTEFORGE_CACHE": str(work / "service-cache"), "ROUTEFORGE_PUBLIC_KEY": f"{key}.pub"}
        cache = work / "service-cache"
        predict = [str(BIN / "routeforge"), "bundle", "predict"]
        cold_v1, _ = timed([*predict, f"models:/{name}/1", "What is 15 plus 27?"], service)
        download_v1 = du(cache)
        warm_v1, _ = timed([*predict, f"models:/{name}/1", "What is 15 plus 27?"], service)
        move_v2, _ = timed([*predict, f"models:/{name}/2", "What is 15 plus 27?"], service)
        download_v2 = du(cache) - download_v1
        warm_v2, _ = timed([*predict, f"models:/{name}/2", "What is 15 plus 27?"], service)
        pyfunc = [sys.executable, "-c", "import sys, time; t = time.perf_counter(); import mlflow; "
                  "m = mlflow.pyfunc.load_model(sys.argv[1]); print(time.perf_counter() - t)", f"models:/{name}/2"]
        pyfunc_env = {**service, "ROUTEFORGE_CACHE": str(work / "pyfunc-cache")}
        _, cold_pyfunc = timed(pyfunc, pyfunc_env)
        _, warm_pyfunc = timed(pyfunc, pyfunc_env)
        components = artifacts.rglob("routeforge-components")
        result = {
            "demo_pipeline_s": round(demo_s, 1),
            "registry_bytes": {"version_1": after_v1, "version_2_added": after_v2 - after_v1,
                               "shared_components_store": sum(du(p) for p in components)},
            "service_download_bytes": {"version_1_cold": download_v1, "moving_to_version_2": download_v2},
            "cli_predict_s": {"cold_cache_v1": round(cold_v1, 2), "warm_cache_v1": round(warm_v1, 2),
                              "move_to_v2": round(move_v2, 2), "warm_cache_v2": round(warm_v2, 2)},
            "pyfunc_load_model_s": {"cold_cache": round(float(cold_pyfunc.split()[-1]), 2),
                                    "warm_cache": round(float(warm_pyfunc.split()[-1]), 2)},
            "note": "fresh processes; CLI times include the interpreter start; the pyfunc times start before "
                    "`import mlflow`. One mlflow server worker on 127.0.0.1, SQLite backend.",
            "machine": {"cpus": os.cpu_count()},
        }
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2))
        print(json.dumps(result, indent=2))
        print(f"wrote {args.out}")
    finally:
        config.unlink(missing_ok=True)
        import signal

        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
