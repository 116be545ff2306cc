"""The vLLM engine for real, on vLLM's CPU build in its own environment (`make vllm-env`): offline
generation through `engine: vllm` gives the transformers engine's rows, with vLLM's token counts
and timings, and a SIGKILL during generation loses nothing and duplicates nothing."""

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
import yaml
from routeforge.core.config import load_fleet
from routeforge.core.storage import Quarantine
from routeforge.generation.engines import make_engine, prompt_rows
from routeforge.generation.engines.vllm_worker import request_timings
from routeforge.prompts.sources import build_prompts

from tests.conftest import VLLM_LLAMA
from tests.generation.test_generation_cache import kill_and_resume

MAX_TOKENS = 16


def test_request_timings_from_v1_and_v0_metrics():
    v1 = SimpleNamespace(first_token_latency=0.25, first_token_ts=100.0, last_token_ts=101.5, arrival_time=5.0)
    assert request_timings(v1) == (0.25, pytest.approx(1.75))
    v0 = SimpleNamespace(arrival_time=10.0, first_token_time=10.2, last_token_time=11.0, finished_time=11.1)
    assert request_timings(v0) == (pytest.approx(0.2), pytest.approx(1.1))
    assert request_timings(None) == (None, None)


def test_missing_vllm_fails_with_the_way_to_get_it(config_copy, monkeypatch):
    import importlib.util

    monkeypatch.delenv("ROUTEFORGE_VLLM_PYTHON", raising=False)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    models = [{"name": "m", "engine": "vllm", "source": {"kind": "hub", "id": "Qwen/Qwen2.5-0.5B-Instruct"}}]
    config = load_fleet(config_copy("demo", models=models, tiers=[]))
    with pytest.raises(RuntimeError, match=r"make vllm-env.*pip install 'routeforge\[gpu\]'"):
        make_engine(config.model("m"), config, config.storage_root)
    models[0]["vllm"] = {"python": "/no/such/python"}
    config = load_fleet(config_copy("demo", models=models, tiers=[]))
    with pytest.raises(RuntimeError, match=r"vllm.python = '/no/such/python': no such interpreter"):
        make_engine(config.model("m"), config, config.storage_root)


def _fleet(config_copy, shared_data, vllm_python: str, n: int, engine: str = "vllm", **generation):
    spec = {"name": "tiny", "engine": engine, "source": VLLM_LLAMA}
    if engine == "vllm":
        spec["vllm"] = {"python": vllm_python, "dtype": "float32", "enforce_eager": True, "max_model_len": 512,
                        "gpu_memory_utilization": 0.05}
    datasets = [{"kind": "builtin", "name": "gsm8k", "reader": "gsm8k", "limit": n,
                 "path": str(shared_data / "prompts" / "gsm8k_test.jsonl")}]
    gen = {"sampling": {"max_tokens": MAX_TOKENS, "ignore_eos": True}, "batch_size": 4, "shard_size": 4, **generation}
    return config_copy("demo", models=[spec], tiers=[], datasets=datasets, generation=gen)


# set in each test's environment and inherited by every process it starts, orphans included: the check
# below counts only this test's vLLM processes, not those of a test running on the other xdist worker
RUN_MARK = "ROUTEFORGE_TEST_RUN"


def _workers(mark: str) -> list[int]:
    """This test's worker scripts and vLLM processes (EngineCore and its workers, which name
    themselves `VLLM::…`): none may outlive a killed run."""
    found = []
    for pattern in ("vllm_worker.py", "VLLM::"):
        out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
        for pid in map(int, out.stdout.split()):
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue  # ended meanwhile
            if f"{RUN_MARK}={mark}".encode() in environ:
                found.append(pid)
    return found


def test_sigkill_during_vllm_generation_then_resume_gives_every_pair_once(config_copy, shared_data, vllm_python,
                                                                          tmp_path):
    """The generation CLI's kill-and-resume trials (one kill during start-up, one after the first new
    shard) with `engine: vllm`; then no vLLM process is left running (worker, EngineCore or its
    workers: an orphaned EngineCore once held a core and memory through the rest of the tests)."""
    n = 64
    path = _fleet(config_copy, shared_data, vllm_python, n, shard_size=2)
    mark = uuid.uuid4().hex
    assert kill_and_resume(path, {**os.environ, RUN_MARK: mark}, tmp_path, trials=2, n=n) >= 1
    deadline = time.time() + 120  # a worker whose parent was killed gets SIGTERM and exits
    while _workers(mark) and time.time() < deadline:
        time.sleep(0.5)
    assert _workers(mark) == []
    assert set(pq.read_table(tmp_path / "final.parquet").column("output_tokens").to_pylist()) == {MAX_TOKENS}


@pytest.mark.timeout(900)
def test_a_two_model_vllm_fleet_generates_beside_6_gib_held_by_another_process(config_copy, shared_data,
                                                                                vllm_python, monkeypatch):
    """vLLM's rows are the transformers engine's rows, with vLLM's token counts and timings. And
    (issue 53, item 2) on vLLM's CPU build the KV cache was a share of the memory node less what the
    worker held, so the second model of a fleet failed ("requested memory for kv (-0.03/0.65 GiB)")
    depending on what else the host held. Sized in bytes from the model, two models generate in turn
    with 6 GiB held by another process, and between them no vLLM process is left and memory returns."""
    import psutil

    mark = uuid.uuid4().hex
    monkeypatch.setenv(RUN_MARK, mark)  # inherited by the engine's worker and vLLM's processes
    hog = subprocess.Popen([sys.executable, "-c", "import sys, time; b = b'\\x01' * (6 << 30); "
                            "print('held', flush=True); time.sleep(600)"], stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout.readline().strip() == "held"
        models = [{"name": f"tiny{i}", "engine": "vllm", "source": {**VLLM_LLAMA, "seed": 7 + i},
                   "vllm": {"python": vllm_python, "dtype": "float32", "enforce_eager": True, "max_model_len": 512,
                            "gpu_memory_utilization": 0.05, "max_num_seqs": 4}} for i in range(2)]
        path = _fleet(config_copy, shared_data, vllm_python, 6)
        raw = yaml.safe_load(path.read_text())
        raw["models"] = models
        path.write_text(yaml.safe_dump(raw))
        config = load_fleet(path)
        rows_in = prompt_rows(build_prompts(config)[0])
        # this process and its children (the engine's worker, vLLM's EngineCore): the machine's free
        # memory would also count what tests on the other xdist worker hold
        def held() -> int:
            me, total = psutil.Process(), 0
            for process in [me, *me.children(recursive=True)]:
                if process.pid != hog.pid:
                    try:
                        total += process.memory_info().rss
                    except psutil.NoSuchProcess:
                        pass  # ended while we counted
            return total

        before = held()
        for spec in config.models:
            engine = make_engine(spec, config, config.storage.mirror / "models")
            try:
                rows = engine.generate(rows_in, Quarantine("responses", spec.name))
            finally:
                engine.close()
            assert engine.version == "0.32.0" and len(rows) == 6
            assert all(r["output_tokens"] == MAX_TOKENS for r in rows)  # ignore_eos: exactly as asked
            texts = [engine.tokenizer(r.text)["input_ids"] for r in rows_in]
            assert [r["prompt_tokens"] for r in rows] == [len(t) for t in texts]  # vLLM's own count of the prompt
            assert all(0 < r["ttft_s"] <= r["e2e_s"] and r["tpot_s"] > 0 for r in rows)
            deadline = time.time() + 60
            while _workers(mark) and time.time() < deadline:
                time.sleep(0.5)
            assert _workers(mark) == [], f"vLLM processes left after {spec.name}"
            assert held() < before + (1 << 30), "memory did not return"
            log = (config.storage.mirror / "models" / "logs" / f"vllm-{spec.name}.log").read_text()
            assert "Explicitly set" in log  # the KV cache in bytes, not a share of the node
    finally:
        hog.kill()
        hog.wait(30)
    reference = load_fleet(_fleet(config_copy, shared_data, vllm_python, 6, engine="transformers"))
    other = make_engine(reference.model("tiny"), reference, reference.storage.mirror / "models")
    theirs = other.generate(prompt_rows(build_prompts(reference)[0]), Quarantine("responses", "tiny"))
    assert [sorted(r) for r in rows] == [sorted(r) for r in theirs]  # the same columns
    assert [r["output_tokens"] for r in theirs] == [MAX_TOKENS] * 6
    assert {r["engine"] for r in rows} == {"vllm"} and {r["prompt_id"] for r in rows} == {r["prompt_id"] for r in theirs}
