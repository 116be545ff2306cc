"""The storage root: local paths and fsspec URIs, push / pull through the mirror with a listing as
the commit, the response cache's markers on a filesystem without rename, and the start-up probe.
fsspec's in-memory filesystem stands in for an object store here; tests/test_production_loopback.py
and tests/generation/test_generation_cache_s3.py do the same against a real S3 server."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from routeforge.core.config import load_fleet
from routeforge.core.config.base import ConfigError
from routeforge.core.storage import ShardCache, read_parquet, write_parquet
from routeforge.core.storage_root import LISTING, StorageError, StorageRoot

from tests.conftest import write_config


@pytest.fixture
def remote(tmp_path, monkeypatch) -> StorageRoot:
    monkeypatch.setenv("ROUTEFORGE_MIRROR", str(tmp_path / "mirror"))
    return StorageRoot(f"memory://routeforge-{uuid.uuid4().hex}/state")


def test_storage_root_values(tmp_path, state_dir):
    uri = load_fleet(write_config(tmp_path, "demo", storage_root="s3://bucket/prefix/"))
    assert uri.storage_root == "s3://bucket/prefix" and not uri.storage.is_local
    local = load_fleet(write_config(tmp_path, "demo", storage_root=f"file://{tmp_path}/x"))
    assert local.storage_root == tmp_path / "x" and local.storage.mirror == tmp_path / "x"
    with pytest.raises(ConfigError, match="registry.signing_key: required when storage_root is an object store"):
        uri.signing_key_path()


def test_push_then_pull_on_a_machine_without_the_folder(remote, tmp_path):
    folder = remote.mirror / "components" / "knn"
    (folder / "sub").mkdir(parents=True)
    (folder / "index.faiss").write_bytes(b"\x00" * 1000)
    (folder / "sub" / "knn.json").write_text("{}")
    remote.push(folder)
    assert remote.path("components", "knn", LISTING).exists()
    assert not (folder / LISTING).exists()  # the bundle writer copies component folders whole

    other = StorageRoot(remote.uri)  # "another machine": an empty mirror
    import shutil

    shutil.rmtree(remote.mirror)
    # a file inside a committed folder pulls the whole folder
    assert other.pull(folder / "sub" / "knn.json").read_text() == "{}"
    assert (folder / "index.faiss").stat().st_size == 1000

    (folder / "sub" / "knn.json").unlink()
    (folder / "new.txt").write_text("new")
    remote.push(folder)  # a re-push drops what the folder no longer has
    assert not remote.path("components", "knn", "sub", "knn.json").exists()
    assert remote.path("components", "knn", "new.txt").read_text() == "new"


def test_pull_refuses_what_was_never_committed(remote):
    folder = remote.mirror / "reports" / "router"
    remote.path("reports", "router", "half.json").write_text("{")  # files without a listing
    with pytest.raises(StorageError, match="reports/router was never committed"):
        remote.pull(folder)
    assert remote.pull(folder, missing_ok=True) == folder


def test_pull_checks_every_file_against_the_listing(remote):
    folder = remote.mirror / "components" / "router"
    folder.mkdir(parents=True)
    (folder / "w.bin").write_bytes(b"abc")
    remote.push(folder)
    remote.path("components", "router", "w.bin").write_bytes(b"abd")  # changed behind the listing
    import shutil

    shutil.rmtree(remote.mirror)
    with pytest.raises(StorageError, match="does not match its listing"):
        remote.pull(folder)


def test_shard_cache_commits_by_marker_without_rename(remote):
    schema = pa.schema([("cache_key", pa.string()), ("v", pa.int64())])
    folder = remote.path("cache", "responses", "m")
    cache = ShardCache(folder, schema, compact_above=3)
    for i in range(5):
        cache.append([{"cache_key": f"k{i}", "v": i}])
    # a writer killed between its shard and its marker leaves an uncommitted shard: ignored, removed
    write_parquet(pa.table({"cache_key": ["k9"], "v": [9]}, schema=schema), folder / "shard-9-dead.parquet")
    assert len(cache.shards()) == 5
    assert sorted(cache.load()) == [f"k{i}" for i in range(5)]
    assert not (folder / "shard-9-dead.parquet").exists()
    cache.compact()
    names = sorted(p.name for p in folder.iterdir())
    assert len(cache.shards()) == 1 and len(names) == 2 and names[1] == names[0] + ShardCache.MARKER
    assert len(cache.load()) == 5


def test_compaction_merges_small_shards_and_leaves_whole_ones(tmp_path):
    """A day's few rows make small shards, merged when many; whole-sized shards (the embedding
    cache's 16,384-text parts) are never merged into one file that every lookup must read whole.
    `tables` gives the shards one at a time, first row per key first."""
    schema = pa.schema([("cache_key", pa.string()), ("v", pa.int64())])
    cache = ShardCache(tmp_path, schema, compact_above=2, compact_rows=10)
    for big in range(2):
        cache.append([{"cache_key": f"b{big}-{i}", "v": i} for i in range(10)])
    for i in range(3):
        cache.append([{"cache_key": f"s{i}", "v": i}, {"cache_key": "b0-0", "v": 99}])
    cache.compact()
    sizes = sorted(t.num_rows for t in cache.tables())
    assert sizes == [4, 10, 10]  # three small shards merged, one row per key among them
    assert len(cache.load()) == 23 and cache.load()["b0-0"]["v"] == 0
    cache.compact()  # the merged shard is one small shard now: nothing more to merge
    assert sorted(t.num_rows for t in cache.tables()) == [4, 10, 10]


def test_stage_files_round_trip_on_a_uri(remote):
    table = pa.table({"a": [1, 2]})
    path = write_parquet(table, remote.path("assets", "t.parquet"))
    assert read_parquet(path).column("a").to_pylist() == [1, 2]


def test_probe_names_the_setting(remote, tmp_path):
    remote.check()  # writes, reads back and deletes its probe object
    root = remote.path()
    assert not [p for p in root.fs.find(root.path) if ".routeforge-probe" in p]
    with pytest.raises(StorageError, match=r"^storage_root gs://bucket/x: the filesystem for this scheme"):
        StorageRoot("gs://bucket/x").check()
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StorageError, match="cannot create the folder"):
        StorageRoot(str(blocker / "state")).check()


def test_component_store_uses_the_mirror_and_writes_quarantine_to_the_root(remote):
    from routeforge.assets.resources import ComponentStore
    from routeforge.core.storage import Quarantine

    store = ComponentStore(root=remote.uri)
    folder = store.component_dir("knn_estimator")
    assert isinstance(folder, Path) and folder.is_relative_to(remote.mirror)
    quarantine = Quarantine("prompts")
    quarantine.add("row-1", "empty text")
    written = store.write_quarantine(quarantine)
    assert str(written).startswith("memory://") and read_parquet(written).num_rows == 1


def test_a_runs_console_summary_counts_quarantined_rows_by_stage_and_reason(tmp_path):
    """Issue 62, item 6: quarantine counts reached only the log file. `quarantine_lines` gives the
    console one line per stage (partitions together), most frequent reasons first, at most 120
    characters; empty quarantine files (written to clear old rows) say nothing."""
    from routeforge.core.storage import Quarantine, quarantine_lines

    responses = Quarantine("responses", partition="tiny-gpt2")
    for k in range(3):
        responses.add(f"p{k}", "empty response")
    responses.add("p9", "over the context")
    responses.write(tmp_path)
    other = Quarantine("responses", partition="tiny-llama")
    other.add("p1", "empty response")
    other.write(tmp_path)
    Quarantine("prompts").write(tmp_path)
    long = Quarantine("quality")
    long.add("p1", "x" * 300)
    long.write(tmp_path)
    lines = quarantine_lines(tmp_path)
    assert "quarantined in responses: 5 (4 empty response, 1 over the context)" in lines
    assert not any("prompts" in line for line in lines)
    assert all(len(line) <= 120 for line in lines) and any(line.endswith("…") for line in lines)
    assert quarantine_lines(tmp_path / "nowhere") == []
