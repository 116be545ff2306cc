"""The vLLM engine: its metric parsing here; generation only where vLLM and a GPU exist."""

import importlib.util
from types import SimpleNamespace

import pytest
from routeforge.generation.engines.vllm_engine import request_timings


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


needs_vllm = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None or not _has_gpu(),
    reason="vLLM (extra 'gpu') and a CUDA GPU are needed; this machine has neither",
)


def test_request_timings_from_v1_and_v0_metrics():
    v1 = SimpleNamespace(first_token_latency=0.25, first_token_ts=100.0, last_token_ts=101.5, arrival_time=5.0)
    assert request_timings(v1) == (0.25, pytest.approx(1.75))
    v0 = SimpleNamespace(arrival_time=10.0, first_token_time=10.2, last_token_time=11.0, finished_time=11.1)
    assert request_timings(v0) == (pytest.approx(0.2), pytest.approx(1.1))
    assert request_timings(None) == (None, None)


def test_missing_vllm_fails_with_the_install_hint(config_copy, monkeypatch):
    import builtins

    from routeforge.core.config import load_fleet
    from routeforge.generation.engines import make_engine

    real_import = builtins.__import__

    def no_vllm(name, *args, **kwargs):
        if name == "vllm":
            raise ImportError("no vllm here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_vllm)
    models = [{"name": "m", "engine": "vllm", "source": {"kind": "hub", "id": "Qwen/Qwen2.5-0.5B-Instruct"}}]
    config = load_fleet(config_copy("demo", models=models, tiers=[]))
    with pytest.raises(RuntimeError, match=r"pip install 'routeforge\[gpu\]'"):
        make_engine(config.model("m"), config, config.storage_root)


@needs_vllm
def test_vllm_generates_rows_with_request_metrics(config_copy, tiny_lm):
    from routeforge.core.config import load_fleet
    from routeforge.core.storage import Quarantine
    from routeforge.generation.engines import make_engine, prompt_rows
    from routeforge.prompts.sources import build_prompts

    models = [{"name": "m", "engine": "vllm", "source": {"kind": "hub", "id": str(tiny_lm)},
               "vllm": {"gpu_memory_utilization": 0.3, "enforce_eager": True}}]
    config = load_fleet(config_copy("demo", models=models, tiers=[]))
    prompts, _ = build_prompts(config)
    q = Quarantine("responses", "m")
    rows = make_engine(config.model("m"), config, config.storage_root).generate(prompt_rows(prompts), q)
    assert len(rows) == prompts.num_rows and len(q) == 0
    assert all(r["ttft_s"] is not None and r["ttft_s"] <= r["e2e_s"] for r in rows)
