"""The response cache's exactly-once guarantee on an object store (no atomic rename there): each
shard is one PUT committed by a marker written after it; SIGKILL at random points, then resume."""

from __future__ import annotations

import os

import pytest
from routeforge.core.config import load_fleet
from routeforge.core.storage import ShardCache
from routeforge.generation.partition import cache_folder

from tests.generation.test_generation_cache import kill_and_resume, local_fleet
from tests.services import Unavailable, s3_server


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    try:
        with s3_server(tmp_path_factory.mktemp("s3"), ("routeforge",)) as server:
            yield server
    except Unavailable as exc:
        pytest.skip(f"no S3 server on this machine: {exc}")


def test_sigkill_with_the_cache_on_s3_then_resume_gives_every_pair_once(config_copy, shared_data, tmp_path, s3,
                                                                         monkeypatch):
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ROUTEFORGE_MIRROR", str(tmp_path / "mirror"))
    n = 240
    path = local_fleet(config_copy, shared_data, n, storage_root="s3://routeforge/crash", shard_size=2, batch_size=2,
                       sampling={"max_tokens": 24})
    config = load_fleet(path)
    assert config.storage_root == "s3://routeforge/crash"
    kills = kill_and_resume(path, dict(os.environ), tmp_path, trials=4, n=n, seed=1)
    assert kills >= 3
    folder = cache_folder(config, "tiny")
    names = [p.name for p in folder.iterdir()]
    # every committed shard has its marker; no uncommitted shard is left once a run has loaded the cache
    shards = [x for x in names if x.endswith(".parquet")]
    assert shards and all(x + ShardCache.MARKER in names for x in shards)
    assert not (tmp_path / "state").exists()


def test_a_stage_file_lost_from_s3_is_rebuilt(config_copy, shared_data, tmp_path, s3, monkeypatch):
    """On an object-store root too: a model partition's responses deleted from the bucket while
    Dagster's records say they are up to date make that partition due (named), and the next run
    writes them again (from the response cache, which was kept: nothing is generated twice)."""
    import dagster as dg
    from routeforge.pipelines.definitions import build_definitions
    from routeforge.pipelines.executors import execute
    from routeforge.pipelines.stale import plan

    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ROUTEFORGE_MIRROR", str(tmp_path / "mirror"))
    monkeypatch.setenv("ROUTEFORGE_SIGNING_KEY", str(tmp_path / "unused.key"))  # nothing is signed here
    path = local_fleet(config_copy, shared_data, 8, storage_root="s3://routeforge/lost")
    config, defs = load_fleet(path), build_definitions(path)
    with dg.instance_for_test() as instance:
        for job, partition in (("build_prompts", None), ("generate_and_score", "tiny")):
            assert execute(defs, config, path, job, instance, partition, {}, {}).success
        assert not plan(defs, instance, "generate_and_score", "tiny", config)
        responses = config.storage.path("assets", "responses", "tiny.parquet")
        assert responses.exists()
        responses.unlink()
        todo = plan(defs, instance, "generate_and_score", "tiny", config)
        assert todo.reasons["responses"] == f"its stored value {responses} is gone"
        assert set(todo.reasons) == {"responses", "quality"}  # quality reads the rebuilt responses
        result = execute(defs, config, path, "generate_and_score", instance, "tiny", {}, {},
                         asset_selection=todo.selection)
        assert result.success and responses.exists()
        assert not plan(defs, instance, "generate_and_score", "tiny", config)
