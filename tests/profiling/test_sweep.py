"""A short QPS sweep against a real `transformers serve --continuous-batching`, then its heads."""

import math

import numpy as np
import pytest
from routeforge.artifacts.deciding.latency import LatencyModel
from routeforge.core.config import SweepSettings
from routeforge.profiling.sweep import FEATURE_COLUMNS, SweepPrompt, records_table, run_sweep
from routeforge.profiling.sweep_heads import evaluate_rwt, sweep_data, sweep_rwt, time_split, train_sweep_heads


@pytest.fixture(scope="module")
def sweep(transformers_server, tiny_lm):
    from transformers import AutoTokenizer

    url, model = transformers_server
    tok = AutoTokenizer.from_pretrained(tiny_lm)
    texts = [f"Question {i}: what is {i} plus {i * 3}? Explain the steps." * (1 + i % 4) for i in range(24)]
    prompts = [SweepPrompt(t, len(tok(t)["input_ids"]), max_tokens=4 + (i % 5) * 3, group=f"g{i % 2}")
               for i, t in enumerate(texts)]
    settings = SweepSettings(warmup_requests=1, idle_requests=6, saturation_requests=16, saturation_concurrency=8,
                             saturation_fractions=[0.3, 0.9], requests_per_rate=30, max_seconds_per_rate=600,
                             request_timeout_s=60, seed=1)
    seen = []
    result = run_sweep(url, model, prompts, settings, "tiny@cpu", progress=lambda *a: seen.append(a), log=lambda m: None)
    return result, seen, prompts


def test_a_rate_phase_stops_dispatching_at_its_time_bound(sweep, transformers_server):
    _, _, prompts = sweep
    url, model = transformers_server
    settings = SweepSettings(warmup_requests=0, idle_requests=1, saturation_requests=2, saturation_concurrency=2,
                             rates=[0.5], requests_per_rate=50, max_seconds_per_rate=3.0, seed=3)
    result = run_sweep(url, model, prompts, settings, "tiny@cpu", log=lambda m: None)
    sent = [r for r in result.records if r["phase"] == "rate"]
    offsets = [r["scheduled_s"] - sent[0]["scheduled_s"] for r in sent]
    assert len(sent) < 50  # the phase stopped long before its 50 requests (0.5 req/s would need ~100 s)
    assert max(offsets) <= 3.0  # nothing was scheduled after the bound
    assert all(r["error"] is None for r in sent)  # what was sent still completes


def test_sweep_records_every_request_with_its_state_at_dispatch(sweep):
    result, seen, _ = sweep
    phases = [r["phase"] for r in result.records]
    assert phases.count("warmup") == 1 and phases.count("idle") == 6 and phases.count("saturation") == 16
    assert phases.count("rate") == 60 and len(result.rates) == 2
    assert {s for s, _, _ in seen} == {"idle", "saturation", "rate"}
    assert result.saturation_rps > 0 and result.saturation_tok_s > 0
    assert result.metrics_available is False  # transformers serve has no /metrics: server features are NaN
    ok = [r for r in result.records if r["error"] is None]
    assert len(ok) == len(result.records)
    for r in ok:
        assert r["output_tokens"] == r["requested_tokens"] and len(r["itl_s"]) == r["output_tokens"] - 1
        assert 0 < r["ttft_s"] < r["e2e_s"]
        assert r["tpot_s"] == pytest.approx((r["e2e_s"] - r["ttft_s"]) / (r["output_tokens"] - 1))
        assert math.isnan(r["f_server_running"])
    idle = [r for r in ok if r["phase"] == "idle"]
    assert all(r["f_in_flight"] == 0 for r in idle)  # one at a time: nothing else in flight at dispatch
    sat = [r for r in ok if r["phase"] == "saturation"]
    assert max(r["f_in_flight"] for r in sat) == 7  # the closed loop keeps 8 in flight
    table = records_table(result.records)
    assert table.num_rows == len(result.records) and set(FEATURE_COLUMNS) <= set(table.column_names)


def test_heads_split_by_time_and_reload_exactly(sweep, tmp_path):
    result, _, _ = sweep
    table = records_table(result.records)
    spec, trained = train_sweep_heads(table, tmp_path / "heads", "tiny@cpu", held_out=0.2, plot=tmp_path / "h.png")
    d = sweep_data(table, 0.2)
    for phase, rate in {(p, r) for p, r in zip(d.phase, d.rate)}:
        cell = (d.phase == phase) & (d.rate == rate)
        latest_train = d.sent_s[cell & (d.split == "train")].max()
        assert (d.sent_s[cell & (d.split == "test")] > latest_train).all()  # test rows are the latest
    assert spec["split"]["test"] > 0 and (tmp_path / "h.png").stat().st_size > 0
    held = spec["evaluation"]["held_out"]
    assert held["requests"] == spec["split"]["test"]
    assert np.isfinite([held["tpot_mae_ms_served"], held["tpot_mae_ms_prior"], held["e2e_mape_analytic"]]).all()
    for head in spec["heads"].values():  # the served kind is the lowest validation MAE, and says so
        mae = head["selection"]["cv_mae_ms"]
        assert head["kind"] == min(mae, key=mae.get) and head["selection"]["why"].startswith(head["kind"])
        assert (head["line"] is None) == (head["kind"] == "trees") and ("trees" in head) == (head["kind"] != "line")
    loaded = LatencyModel.load(tmp_path / "heads")
    assert loaded.golden_max_abs_diff() == 0.0
    replay = loaded.predict_matrix(d.x)
    assert np.array_equal(replay["tpot"], trained["tpot"]) and np.array_equal(replay["ttft"], trained["ttft"])
    assert np.array_equal(replay["e2e_direct"], trained["e2e"])
    params = sweep_rwt(result.summary, max_output_tokens=16)
    assert params.theta_tok_s == pytest.approx(result.saturation_tok_s)
    rows = evaluate_rwt(table, params)
    assert [r["rate"] for r in rows] == sorted(result.rates)
    assert all(r["requests"] == 30 and r["observed_wait_ms"] >= 0 for r in rows)


def test_time_split_keeps_order_within_each_rate():
    split = time_split(["rate"] * 10 + ["idle"] * 5, [1.0] * 10 + [0.0] * 5, list(range(10)) + list(range(5)), 0.2)
    assert list(split[:10]) == ["train"] * 6 + ["val"] * 2 + ["test"] * 2
    assert list(split[10:]) == ["train"] * 3 + ["val"] + ["test"]
