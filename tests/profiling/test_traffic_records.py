"""Latency records reconstructed from a traffic log: the replayed state at dispatch is what the
server saw, and heads trained on it beat the static prior on the log's latest requests."""

import numpy as np
from routeforge.core.storage import Quarantine
from routeforge.profiling.sweep_heads import train_sweep_heads
from routeforge.profiling.traffic_records import replay, traffic_rwt
from routeforge.prompts.traffic_logs import read_traffic_logs

from tests.traffic import synthetic_log


def test_replay_reconstructs_the_queue_each_request_found(tmp_path):
    lines = synthetic_log(tmp_path / "log.jsonl", n=300, rate=6.0)
    records = replay(read_traffic_logs(str(tmp_path / "log.jsonl"), Quarantine("p")), "tiny-llama@cpu").to_pydict()
    assert len(records["ttft_s"]) == 300 and set(records["phase"]) == {"traffic"}
    spans = [(ln["timestamp"], ln["timestamp"] + ln["timing"]["ttft_s"], ln["timestamp"] + ln["timing"]["e2e_s"])
             for ln in lines]
    for i, (sent, _, _) in enumerate(spans):
        waiting = sum(1 for s, f, _ in spans[:i] if f > sent)
        decoding = sum(1 for s, f, e in spans[:i] if f <= sent < e)
        assert records["f_waiting_first_token"][i] == waiting and records["f_decoding"][i] == decoding
    assert records["f_in_flight"][0] == 0 and np.isnan(records["f_server_running"][0])


def test_heads_trained_on_traffic_beat_the_prior_on_the_latest_requests(tmp_path):
    synthetic_log(tmp_path / "log.jsonl", n=600, rate=8.0)
    records = replay(read_traffic_logs(str(tmp_path / "log.jsonl"), Quarantine("p")), "tiny-llama@cpu")
    spec, _ = train_sweep_heads(records, tmp_path / "heads", "tiny-llama@cpu")
    held = spec["evaluation"]["held_out"]
    assert held["ttft_mae_ms_served"] < 0.5 * held["ttft_mae_ms_prior"]
    assert held["tpot_mae_ms_served"] < 0.5 * held["tpot_mae_ms_prior"]
    assert np.isfinite(spec["prior"]["ttft_s"]) and spec["prior"]["tpot_s"] > 0  # from the lightest load
    rwt = traffic_rwt(records, max_output_tokens=64)
    assert rwt.decode_s > 0 and rwt.epsilon >= 1 and rwt.theta_tok_s > 0
