"""Cache and resume: re-runs generate only what is missing; SIGKILL at any point loses nothing."""

import os
import random
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
from routeforge.core.config import load_fleet
from routeforge.generation.engines import identity
from routeforge.generation.partition import ResponseCache, cache_folder, generate_partition
from routeforge.prompts.sources import build_prompts

from tests.conftest import REPO, TINY_LLAMA


def local_fleet(config_copy, shared_data, n_prompts, storage_root: str | None = None, **generation):
    models = [{"name": "tiny", "engine": "transformers", "source": TINY_LLAMA}]
    datasets = [{"kind": "builtin", "name": "gsm8k", "reader": "gsm8k", "limit": n_prompts,
                 "path": str(shared_data / "prompts" / "gsm8k_test.jsonl")}]
    gen = {"sampling": {"max_tokens": 12}, "batch_size": 4, "shard_size": 4, **generation}
    where = {"storage_root": storage_root} if storage_root else {}
    return config_copy("demo", models=models, tiers=[], datasets=datasets, generation=gen, **where)


def test_rerun_generates_nothing_and_new_prompts_exactly(config_copy, shared_data):
    config = load_fleet(local_fleet(config_copy, shared_data, 40))
    prompts, _ = build_prompts(config)
    first = generate_partition(config, "tiny", prompts, log=lambda m: None)
    assert first.generated == 40 and first.cache_hits == 0 and first.shards_written == 10

    second = generate_partition(config, "tiny", prompts, log=lambda m: None)
    assert second.generated == 0 and second.generated_output_tokens == 0 and second.cache_hits == 40
    assert second.engine_version is None  # no model was loaded
    assert second.table.to_pylist() == first.table.to_pylist()

    grown = load_fleet(local_fleet(config_copy, shared_data, 42))  # 5% more prompts
    more, _ = build_prompts(grown)
    third = generate_partition(grown, "tiny", more, log=lambda m: None)
    assert third.generated == 2 and third.cache_hits == 40 and third.table.num_rows == 42

    # a changed sampling setting is a different cache key: everything is generated again
    changed = load_fleet(local_fleet(config_copy, shared_data, 40, sampling={"max_tokens": 11}))
    assert identity(changed, "tiny").key("x") != identity(config, "tiny").key("x")


def test_cache_tolerates_leftovers_of_killed_runs(config_copy, shared_data):
    config = load_fleet(local_fleet(config_copy, shared_data, 8))
    prompts, _ = build_prompts(config)
    generate_partition(config, "tiny", prompts, log=lambda m: None)
    folder = cache_folder(config, "tiny")
    shards = sorted(folder.glob("shard-*.parquet"))
    (folder / "shard-99999999999999999999-deadbeef.parquet.tmp123").write_bytes(b"half a file")
    shards[0].write_bytes(b"PAR1 not really")  # a corrupt shard is set aside and regenerated
    again = generate_partition(config, "tiny", prompts, log=lambda m: None)
    assert again.generated == 4 and again.table.num_rows == 8
    assert not list(folder.glob("*.tmp*")) and len(list(folder.glob("*.unreadable-*"))) == 1


def test_compaction_keeps_every_row_once(tmp_path, config_copy, shared_data):
    config = load_fleet(local_fleet(config_copy, shared_data, 12, shard_size=1))
    prompts, _ = build_prompts(config)
    generate_partition(config, "tiny", prompts, log=lambda m: None)
    cache = ResponseCache(cache_folder(config, "tiny"), compact_above=4)
    assert len(cache.shards()) == 12
    cache.compact()
    assert len(cache.shards()) == 1 and len(cache.load()) == 12


def _shards(config) -> int:
    return len(ResponseCache(cache_folder(config, "tiny")).shards())


def kill_and_resume(path, env, tmp_path, trials: int, n: int, seed: int = 0) -> int:
    """Start the generation CLI `trials` times and SIGKILL it at a random point, during start-up
    (even trials) or a random moment after it has written its first new shard (odd trials); then
    resume to the end and check every (prompt, model) pair is present exactly once. Returns how many
    kills landed while the process was running."""
    config = load_fleet(path)
    cmd = [sys.executable, "-m", "routeforge.fleet.generate", str(path), "--model", "tiny"]
    rng = random.Random(seed)
    killed_while_running = 0
    for trial in range(trials):
        before = _shards(config)
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if trial % 2 == 0:
            time.sleep(rng.uniform(0.5, 4.0))
        else:
            # the first new shard comes after the engine's start-up: a CPU vLLM worker's came later than
            # 120 s on a busy 2-core machine; a run that never writes a shard still fails below
            deadline = time.time() + 300
            while _shards(config) == before and proc.poll() is None and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 0.5))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed_while_running += 1
        proc.wait()
    assert 0 < _shards(config) < n // 2  # kills landed mid-generation: some work done, not all (n / 2 shards)
    final = subprocess.run(cmd + ["--out", str(tmp_path / "final.parquet")], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=600)
    assert final.returncode == 0, final.stderr[-3000:]
    table = pq.read_table(tmp_path / "final.parquet")
    prompts, _ = build_prompts(config)
    ids = table.column("prompt_id").to_pylist()
    assert sorted(ids) == sorted(prompts.column("prompt_id").to_pylist())  # every pair, exactly once
    keys = [r["cache_key"] for r in ResponseCache(cache_folder(config, "tiny")).load().values()]
    assert len(keys) == len(set(keys)) == n
    return killed_while_running


def test_sigkill_at_random_points_then_resume_gives_every_pair_once(config_copy, shared_data, tmp_path):
    """6 kills on a local cache (three in start-up, three after a first new shard). The partition is
    large enough that the short runs cannot finish it on a fast, idle machine (at 240 prompts and
    ten trials a run sometimes finished before its kill, and the trial killed nothing); ten trials
    over 720 prompts took 184 s of CI, most of it the final run's generation."""
    n = 480
    path = local_fleet(config_copy, shared_data, n, shard_size=2, batch_size=2, sampling={"max_tokens": 24})
    # the subprocess resolves the same config file to the same storage
    assert kill_and_resume(path, dict(os.environ), tmp_path, trials=6, n=n) >= 5


def test_the_identity_key_is_the_cache_key_of_earlier_releases():
    """`Identity.key` builds the payload from a fixed prefix: the same bytes as `cache_key`, so every
    cached response stays valid."""
    from routeforge.generation.engines.base import Identity, cache_key

    ident = Identity("transformers", "org/m", None, {"temperature": 0.0, "max_tokens": 5, "stop": ["\n"], "z": None})
    for text in ["hi", 'é\u2028"quoted"\n', "", "a" * 1000]:
        assert ident.key(text) == cache_key(text, "org/m", None, ident.sampling, "transformers")
