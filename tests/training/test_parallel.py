"""Embedding and cross-validation folds as Ray tasks on a local two-CPU cluster on loopback give the
single process's results (issue 39, item 4)."""

import numpy as np
import pytest
from routeforge.core.pretrained import ENCODER_PACKAGE_REF
from routeforge.training.embeddings import embedding_counts, encode_cached
from routeforge.training.parallel import RayTasks, Serial, chunks, parallel_tasks, pool_for
from routeforge.training.predictors.router_family import Candidate
from routeforge.training.predictors.router_selection import cross_validate, fold_ids

ray = pytest.importorskip("ray", reason="Ray is the `deploy` extra")


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             configure_logging=False)
    try:
        yield RayTasks()
    finally:
        ray.shutdown()


def test_chunks_hold_whole_batches_and_cover_every_item():
    parts = chunks(300, 2, 64)
    assert [(p.start, p.stop) for p in parts] == [(0, 192), (192, 300)]
    assert sum(p.stop - p.start for p in chunks(10, 4)) == 10 and chunks(0, 2) == []


def test_the_fleet_executor_picks_the_pool():
    class Execution:
        executor = "in_process"

    assert isinstance(pool_for(Execution()), Serial)


def test_a_step_running_as_a_ray_job_fans_its_embedding_out_to_the_cluster(tmp_path):
    """What a training step does under the `ray` executor (dagster-ray runs each step as a Ray job):
    inside the job, `pool_for` joins the job's cluster and the embedding spreads over its workers.
    (It runs before the tests that start an in-process cluster: beside one, its job agent never came up.)"""
    import sys
    import time

    from ray.job_submission import JobSubmissionClient

    from tests.services import Unavailable, ray_cluster, ray_job_outcome

    script = tmp_path / "step.py"
    script.write_text(
        "import json\n"
        "from routeforge.core.pretrained import ENCODER_PACKAGE_REF\n"
        "from routeforge.training.embeddings import encode_cached\n"
        "from routeforge.training.parallel import parallel_tasks, pool_for\n"
        "class Execution:\n    executor = 'ray'\n"
        "lines = []\n"
        "with parallel_tasks(pool_for(Execution())) as pool:\n"
        f"    v = encode_cached([f'prompt {{i}} ' * (i % 5 + 1) for i in range(300)], ENCODER_PACKAGE_REF, 'right',"
        f" {str(tmp_path / 'cache')!r}, log=lines.append)\n"
        "print('RESULT', json.dumps({'workers': pool.workers, 'shape': list(v.shape), 'lines': lines}))\n")
    try:
        with ray_cluster(tmp_path / "ray", num_cpus=3) as address:  # the step's driver holds one CPU
            client = JobSubmissionClient(address)
            deadline = time.monotonic() + 300
            while True:  # the head's job agent comes up a little after its dashboard answers
                try:
                    job = client.submit_job(entrypoint=f"{sys.executable} {script}",
                                            runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1"}})
                    break
                except RuntimeError as exc:
                    if "No available agent" not in str(exc) or time.monotonic() > deadline:
                        raise
                    time.sleep(2)
            outcome = ray_job_outcome(client, job, timeout_s=300)
            logs = client.get_job_logs(job)
            assert outcome == "SUCCEEDED", logs[-3000:]
    except Unavailable as exc:
        pytest.skip(str(exc))
    import json

    result = json.loads(next(line for line in logs.splitlines() if line.startswith("RESULT ")).removeprefix("RESULT "))
    assert result["workers"] == 3 and result["shape"] == [300, 384]
    assert any("tasks on 3 workers" in line for line in result["lines"])


def test_embedding_on_ray_workers_equals_the_single_process(cluster, tmp_path):
    texts = [f"Question {i}: how many {w} fit in a box of side {i % 9 + 1}?" * (1 + i % 4)
             for i, w in enumerate(["apples", "cubes", "marbles", "books"] * 50)]
    with embedding_counts() as counts:
        here = encode_cached(texts, ENCODER_PACKAGE_REF, "left", tmp_path / "serial")
    lines = []
    with parallel_tasks(cluster), embedding_counts() as spread_counts:
        spread = encode_cached(texts, ENCODER_PACKAGE_REF, "left", tmp_path / "ray", log=lines.append)
    assert cluster.workers == 2 and any("as 2 tasks on 2 workers" in line for line in lines)
    assert dict(counts) == dict(spread_counts) == {"embedded": 200, "from_cache": 0}
    assert spread.shape == here.shape == (200, 384)
    assert np.abs(spread - here).max() < 1e-5 and np.sum(spread * here, axis=1).min() > 0.99999


def test_cross_validation_folds_on_ray_workers_equal_the_single_process(cluster):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(240, 32)).astype(np.float32)
    y = (rng.random((240, 3)) < 1 / (1 + np.exp(-x[:, :3]))).astype(np.float64)
    y[rng.random(y.shape) < 0.05] = np.nan  # some labels missing, as in a routing table
    folds = fold_ids(len(x), 3, seed=0)
    cands = [Candidate("knn", {"k": 10, "prior_strength": 0.0}), Candidate("mlp", {"hidden": 0, "epochs": 5,
                                                                                    "weight_decay": 0.01})]
    here = cross_validate(cands, x, y, folds, seed=0, log=lambda _: None)
    with parallel_tasks(cluster):
        spread = cross_validate(cands, x, y, folds, seed=0, log=lambda _: None)
    assert list(spread) == list(here)
    for name in here:
        assert np.allclose(spread[name], here[name], atol=1e-6), name

