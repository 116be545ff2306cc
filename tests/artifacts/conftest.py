import json
import subprocess
import sys
from pathlib import Path

import pytest
from routeforge.artifacts.bundle.manifest import Fleet, ModelEntry
from routeforge.artifacts.bundle.writer import ComponentSource

from tests.conftest import free_port, stop, wait_healthy


@pytest.fixture
def component(tmp_path) -> ComponentSource:
    folder = tmp_path / "src" / "knn"
    (folder / "nested").mkdir(parents=True)
    (folder / "index.bin").write_bytes(bytes(range(256)) * 4)
    (folder / "nested" / "meta.json").write_text(json.dumps({"k": 3}))
    return ComponentSource(name="knn_estimator", kind="knn_estimator", format="test", folder=folder,
                           metrics={"acc": 0.5})


@pytest.fixture
def fleet() -> Fleet:
    return Fleet(name="t", models=[ModelEntry(name="a", engine="transformers", input_per_mtok=1.0,
                                              output_per_mtok=2.0)])


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """A real `mlflow server` on 127.0.0.1 (SQLite backend, proxied artifact store)."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    log = open(root / "server.log", "w")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination",
         str(root / "artifacts"), "--workers", "1"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    wait_healthy(proc, f"{url}/health", root / "server.log", timeout_s=120)
    yield url
    stop(proc)
    log.close()
