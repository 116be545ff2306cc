"""The cluster simulator: exact step arithmetic, KV preemption, rejection, workloads, baselines."""

import numpy as np
import pytest
from routeforge.training.policies.simulator.baselines import (
    BASELINES,
    JoinShortestQueue,
    QualityOnly,
    RoundRobin,
    RouteBalance,
    untrained_baselines,
)
from routeforge.training.policies.simulator.cluster import DROP, WAIT, Cluster, Request
from routeforge.training.policies.simulator.instance import Instance, InstanceProfile, Job
from routeforge.training.policies.simulator.metrics import summarize
from routeforge.training.policies.simulator.traces import read_trace
from routeforge.training.policies.simulator.workloads import RequestPool, arrivals, switched_poisson

PROFILE = InstanceProfile(prefill_intercept_s=0.01, prefill_s_per_token=1e-4, decode_w_s=0.02,
                          decode_h_s_per_token=1e-5, max_running=8, kv_capacity_tokens=100_000)


def _request(rid, arrival, prompt=100, out=20, quality=(1.0,)):
    return Request(rid, arrival, prompt, np.full(len(quality), out), np.array(quality, dtype=float))


def test_a_lone_request_takes_one_prefill_step_then_one_decode_step_per_token():
    [o] = Cluster([PROFILE]).run([_request(0, 1.0, prompt=100, out=20)], RoundRobin())
    ttft = 0.01 + 1e-4 * 100
    decode = sum(0.02 + 1e-5 * (100 + k) for k in range(1, 20))  # step k sees 100 + k context tokens
    assert o.ttft == pytest.approx(ttft) and o.e2e == pytest.approx(ttft + decode)
    assert o.tpot == pytest.approx(decode / 19)


def test_closed_form_stretches_match_many_small_horizons():
    jobs = [Job(i, 50 + 10 * i, 30 + 7 * i, 0.0) for i in range(6)]
    coarse, fine = Instance("a", PROFILE), Instance("b", PROFILE)
    for inst in (coarse, fine):
        for j in jobs:
            inst.enqueue(Job(j.rid, j.prompt_tokens, j.output_tokens, 0.0), 0.0)
    coarse.advance(float("inf"))
    for t in np.arange(0.001, 10.0, 0.0137):
        fine.advance(float(t))
    fine.advance(float("inf"))
    assert [(j.rid, j.finished) for j in coarse.done] == [(j.rid, pytest.approx(j.finished)) for j in fine.done]
    assert len(coarse.done) == 6


def test_kv_overflow_preempts_and_recomputes_and_oversized_requests_are_rejected():
    small = InstanceProfile(0.01, 1e-4, 0.02, 1e-5, max_running=8, kv_capacity_tokens=400)
    reqs = [_request(i, 0.0, prompt=60, out=80) for i in range(4)] + [_request(9, 0.0, prompt=500, out=5)]
    outcomes = Cluster([small]).run(reqs, RoundRobin())
    served = [o for o in outcomes if o.served]
    assert len(served) == 4 and sum(o.job.preemptions for o in served) > 0
    assert all(o.job.output_tokens == 80 for o in served)
    assert outcomes[-1].reason == "larger than the KV cache"


def test_full_buffers_reject_and_the_policy_can_wait_or_drop():
    buffered = InstanceProfile(0.01, 1e-4, 0.02, 1e-5, max_running=1, buffer=1)
    outcomes = Cluster([buffered]).run([_request(i, 0.001 * i) for i in range(3)], RoundRobin())
    assert [o.reason for o in outcomes] == [None, None, "buffer full"]

    class WaitThenDrop:
        def assign(self, queue, cluster, now):
            return [WAIT if now - r.arrival < 0.1 else DROP for r in queue]

    [o] = Cluster([PROFILE]).run([_request(0, 0.0)], WaitThenDrop(), decision_interval_s=0.02)
    assert o.instance == DROP and o.reason == "dropped by the policy" and o.dispatched == pytest.approx(0.1, abs=0.021)


def test_baselines_pick_as_documented():
    """Each decides from the router's side only: what it sent where (routed below) and the scrapes."""
    cluster = Cluster([PROFILE] * 3, models=[0, 1, 2])
    req = _request(0, 0.0, quality=(0.2, 0.9, 0.5))
    assert [RoundRobin().choose(req, cluster.router(0.0), 0.0) for _ in range(1)] == [0]
    cluster.route(_request(5, 0.0, prompt=10, out=10, quality=(0.0, 0.0, 0.0)), 0, 0.0)
    assert JoinShortestQueue().choose(req, cluster.router(0.0), 0.0) == 1
    assert QualityOnly().choose(req, cluster.router(0.0), 0.0) == 1
    assert RouteBalance(weights=(1.0, 0.0, 0.0)).assign([req], cluster.router(0.0), 0.0) == [1]
    cluster.route(_request(6, 0.0, prompt=4000, out=4000, quality=(0.0, 0.0, 0.0)), 1, 0.0)  # instance 1 slow
    assert RouteBalance(weights=(0.0, 1.0, 0.0)).assign([req], cluster.router(0.0), 0.0) == [2]


def test_every_baseline_serves_a_moderate_poisson_load():
    rng = np.random.default_rng(0)
    pool = RequestPool(rng.integers(20, 200, 50), rng.integers(5, 60, (50, 2)), rng.random((50, 2)), ["t"] * 50,
                       ["a", "b"])
    reqs = pool.requests(arrivals("poisson", 300, rate=20.0))
    for name, policy in ((n, BASELINES[n]) for n in untrained_baselines()):
        stats = summarize(Cluster([PROFILE] * 4, models=[0, 1, 0, 1]).run(reqs, policy()), slo_e2e_s=5.0)
        assert stats["served"] == 300 and stats["dropped"] == 0, name
        assert 0 < stats["e2e_p50_s"] <= stats["e2e_p95_s"] and 0 <= stats["slo_attainment"] <= 1, name


def test_workload_generators(shared_data, tmp_path):
    spp = switched_poisson(20_000, seed=1)
    # 004's process starts in the 180 req/s phase, leaves it after ~28 s and then stays near 10 req/s
    # (it returns at 0.0002/s)
    assert np.all(np.diff(spp) >= 0)
    assert 1000 / (spp[1000] - spp[0]) == pytest.approx(180, rel=0.15)
    assert 2000 / (spp[-1] - spp[-2001]) == pytest.approx(10, rel=0.15)
    # stopping at a horizon gives exactly the full draw's arrivals before it, phases included
    full, phases = switched_poisson(20_000, seed=1, with_phases=True)
    for until in (0.5, 40.0, 1e9):
        cut, cut_phases = switched_poisson(20_000, seed=1, with_phases=True, until=until)
        assert np.array_equal(cut, full[full < until]) and np.array_equal(cut_phases, phases[full < until])
    wave = arrivals("square_wave", 4000, rate=10.0, period_s=20.0)
    first_half = ((wave % 20.0) < 10.0).mean()
    assert first_half == pytest.approx(15 / 20, abs=0.05)  # 15 req/s for half the time, 5 for the other
    times, prompt, output = read_trace(shared_data / "traces" / "azure_llm_inference_conv_2023.csv", limit=500)
    assert len(times) == 500 and times[0] == 0.0 and np.all(np.diff(times) >= 0)
    assert prompt.min() >= 1 and output.min() >= 1
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n2023-11-16 x,1,1\n")
    with pytest.raises(ValueError, match="row 3, column 'TIMESTAMP'"):
        read_trace(bad)


def test_static_batches_reproduce_measurements_made_by_the_same_arithmetic():
    from routeforge.profiling.batch_fits import BatchMeasurement
    from routeforge.training.policies.simulator.calibration import static_batches

    ms = []
    for b, p, t in ((1, 100, 20), (4, 200, 50), (8, 50, 10)):
        decode = np.mean([PROFILE.nominal_tpot(b * (p + k)) for k in range(1, t)])  # step k holds b·(p + k)
        ms.append(BatchMeasurement(b, p, t, prefill_s=0.01 + 1e-4 * b * p, decode_iter_s=float(decode)))
    result = static_batches(InstanceProfile(0.01, 1e-4, 0.02, 1e-5, max_running=64), ms)
    assert result["batches"] == 3
    assert result["ttft_ape_mape"] < 1e-9 and result["tpot_ape_mape"] < 1e-9 and result["e2e_ape_mape"] < 1e-9
    # capacity: one request's prefill plus its share of full-batch decode steps
    cap = PROFILE.capacity_rps(100, 20)
    step = PROFILE.nominal_tpot(8 * (100 + 10))
    assert cap == pytest.approx(1 / (0.01 + 1e-4 * 100 + 20 * step / 8))


def test_pool_from_routing_table_carries_predictions_and_ablates_them():
    import pyarrow as pa
    from routeforge.core.schemas import routing_table_schema

    data = {"prompt_id": ["a", "b", "c"], "task": ["t"] * 3, "text": ["x", "y", "z"], "split": ["test"] * 3,
            "quality/m": [1.0, None, 0.0], "output_tokens/m": [10.0, 20.0, 30.0], "cost/m": [1.0] * 3}
    table = pa.Table.from_pydict(data, schema=routing_table_schema(["m"]))
    pool = RequestPool.from_routing_table(table, np.array([5, 6, 7]), predicted_quality=np.array([[0.9], [0.5], [0.2]]),
                                          predicted_tokens=np.array([[12.0], [22.0], [28.0]]))
    assert len(pool) == 2  # the unlabelled prompt is left out, and its prediction with it
    assert pool.predicted_quality[:, 0].tolist() == [0.9, 0.2] and pool.prompt_tokens.tolist() == [5, 7]
    [r] = pool.ablated(quality="predicted", length="zero").requests(np.array([0.0]), in_order=True)
    assert r.est_quality(0) == 0.9 and r.est_tokens(0) == 0.0
    [r] = pool.ablated().requests(np.array([0.0]), in_order=True)
    assert r.est_quality(0) == 1.0 and r.est_tokens(0) == 10.0  # the truth
    with pytest.raises(ValueError, match="quality: 'guess'"):
        pool.ablated(quality="guess")


def test_traces_with_other_column_names_and_units(tmp_path):
    from routeforge.training.policies.simulator.traces import TraceColumns, TraceError

    columns = TraceColumns(timestamp="ts_ms", timestamp_unit="ms", prompt_tokens="in", output_tokens="out")
    jsonl = tmp_path / "gateway.jsonl"
    jsonl.write_text('{"ts_ms": 1000, "in": 12, "out": 3}\n\n{"ts_ms": 1250.5, "in": 40, "out": 9}\n'
                     '{"ts_ms": 3000, "in": 7, "out": 1}\n')
    times, prompt, output = read_trace(jsonl, columns=columns)
    assert times == pytest.approx([0.0, 0.2505, 2.0]) and prompt.tolist() == [12, 40, 7] and output.tolist() == [3, 9, 1]
    csv_file = tmp_path / "log.csv"
    csv_file.write_text("when,in,out\n2024-05-01T10:00:00+00:00,5,5\n2024-05-01T10:00:01.5+00:00,6,6\n")
    times, _, _ = read_trace(csv_file, columns=TraceColumns(timestamp="when", prompt_tokens="in", output_tokens="out"))
    assert times.tolist() == [0.0, 1.5]

    def fails(text: str, match: str, suffix: str = ".csv", cols: TraceColumns = columns):
        path = tmp_path / f"bad{suffix}"
        path.write_text(text)
        with pytest.raises(TraceError, match=match) as info:
            read_trace(path, columns=cols)
        assert len(str(info.value).splitlines()) == 1

    fails("ts_ms,in\n1,2\n", r"row 1: no column 'out'")                                  # missing column
    fails("ts_ms,in,out\n5,1,1\n-1,1,1\n", r"row 3, column 'ts_ms': timestamp '-1' is negative")
    fails("ts_ms,in,out\n5,1,1\n4,1,1\n", r"row 3, column 'ts_ms': timestamps go backwards")
    fails("ts_ms,in,out\n5,1,1\n6,many,1\n", r"row 3, column 'in': 'many' is not a token count")
    fails("ts_ms,in,out\n5,1,1\n6,1,2.5\n", r"row 3, column 'out': token counts are positive integers")
    fails("ts_ms,in,out\n5,1,\n", r"row 2, column 'out': missing")
    fails('{"ts_ms": 1, "in": 1, "out": 1}\n[1, 2]\n', r"row 2: a JSON object is expected", ".jsonl")
    fails('{"ts_ms": 1, "in": 1, "out": 1}\n{oops\n', r"row 2: invalid JSON", ".jsonl")
    fails("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n", r"row 2, column 'TIMESTAMP': 'yesterday'",
          cols=TraceColumns())


def test_a_trace_read_with_a_quarantine_keeps_the_good_rows_and_names_the_bad_ones(tmp_path):
    from routeforge.core.storage import Quarantine
    from routeforge.training.policies.simulator.traces import TraceColumns, TraceError

    columns = TraceColumns(timestamp="ts", timestamp_unit="s", prompt_tokens="in", output_tokens="out")
    path = tmp_path / "day.jsonl"
    path.write_bytes(b'{"ts": 1, "in": 5, "out": 2}\n{"ts": NaN, "in": 5, "out": 2}\n{"ts": 2, "in": "\\ud800", '
                     b'"out": 2}\n\xff\xfe\n{"ts": 0.5, "in": 5, "out": 2}\n{"ts": 3, "in": 1e400, "out": 2}\n'
                     b'{"ts": 4, "in": 7, "out": 3}\n')
    quarantine = Quarantine("traces")
    times, prompt, output = read_trace(path, columns=columns, quarantine=quarantine)
    assert times.tolist() == [0.0, 3.0] and prompt.tolist() == [5, 7] and output.tolist() == [2, 3]
    reasons = {r["row"]: r["reason"] for r in quarantine.rows}
    assert list(reasons) == ["day.jsonl:2", "day.jsonl:3", "day.jsonl:4", "day.jsonl:5", "day.jsonl:6"]
    assert "NaN" in reasons["day.jsonl:2"] and "invalid Unicode" in reasons["day.jsonl:3"]
    assert "UTF-8" in reasons["day.jsonl:4"] and "go backwards" in reasons["day.jsonl:5"]
    assert reasons["day.jsonl:6"].startswith("column 'in'")
    csv_file = tmp_path / "day.csv"
    csv_file.write_bytes(b"ts,in,out\n1,5,2\n2,\xff,2\n3,6,1\n")
    quarantine = Quarantine("traces")
    assert read_trace(csv_file, columns=columns, quarantine=quarantine)[1].tolist() == [5, 6]
    assert [r["reason"] for r in quarantine.rows] == ["column 'in': invalid UTF-8"]
    path.write_text('{"ts": -1, "in": 5, "out": 2}\n')
    with pytest.raises(TraceError, match="no usable rows.*1 quarantined"):
        read_trace(path, columns=columns, quarantine=Quarantine("traces"))


def test_routing_evaluation_reads_a_mapped_trace_from_the_fleet_file(tmp_path):
    from routeforge.core.config.training import RoutingEvaluationSettings, TraceSettings
    from routeforge.training.policies.evaluation import trace_source

    settings = RoutingEvaluationSettings.model_validate(
        {"workloads": ["trace"], "trace": {"path": str(tmp_path / "t.jsonl"), "timestamp": "ts",
                                           "timestamp_unit": "s", "prompt_tokens": "p", "output_tokens": "o"}})
    assert isinstance(settings.trace, TraceSettings)
    path, columns = trace_source(settings.trace)
    assert path == tmp_path / "t.jsonl" and columns.timestamp == "ts" and columns.file_format(path) == "jsonl"
    plain = RoutingEvaluationSettings.model_validate({"workloads": ["trace"], "trace": str(tmp_path / "a.csv")})
    assert trace_source(plain.trace)[1].timestamp == "TIMESTAMP"
