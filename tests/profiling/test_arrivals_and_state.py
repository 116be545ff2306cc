"""Arrival processes, the client's dead reckoning and /metrics parsing, without a server."""

import math

import numpy as np
import pytest
from routeforge.profiling.arrivals import arrival_times
from routeforge.profiling.live_state import FEATURES, ClientState, MetricsScraper, parse_metrics


@pytest.mark.parametrize("kind,cv", [("poisson", 1.0), ("gamma", 2.0), ("constant", 0.0)])
def test_arrivals_have_the_rate_and_burstiness_asked_for(kind, cv):
    t = arrival_times(kind, rate=20.0, n=20_000, seed=3, cv=max(cv, 2.0))
    gaps = np.diff(t)
    assert t[0] == 0.0 and (gaps >= 0).all()
    assert abs(1 / gaps.mean() - 20.0) < 0.6
    assert abs(gaps.std() / gaps.mean() - cv) < 0.1
    assert np.array_equal(t, arrival_times(kind, 20.0, 20_000, seed=3, cv=max(cv, 2.0)))


def test_arrivals_reject_bad_arguments():
    with pytest.raises(ValueError, match="rate"):
        arrival_times("poisson", 0, 10)
    with pytest.raises(KeyError, match="unknown workload kind 'uniform'.*known: constant, gamma, poisson"):
        arrival_times("uniform", 1, 10)
    with pytest.raises(ValueError, match="'trace' is a workload read from data, not an arrival process"):
        arrival_times("trace", 1, 10)


def test_client_state_dead_reckons_the_servers_load():
    s = ClientState(window_s=1.0)
    s.sent(1, prompt_tokens=100, expected_tokens=10, now=0.0)
    s.sent(2, prompt_tokens=50, expected_tokens=20, now=0.1)
    snap = s.snapshot(0.1, predicted_output_tokens=5)
    assert snap["in_flight"] == 2 and snap["waiting_first_token"] == 2 and snap["decoding"] == 0
    assert snap["pending_prefill_tokens"] == 150 and snap["pending_decode_tokens"] == 30
    assert math.isnan(snap["recent_itl_ms"]) and math.isnan(snap["backlog_s"])
    for t in (0.2, 0.25, 0.30):  # request 1: first token at 0.2, then two 50 ms gaps
        s.token(1, t)
    snap = s.snapshot(0.3, predicted_output_tokens=5)
    assert snap["waiting_first_token"] == 1 and snap["decoding"] == 1
    assert snap["pending_prefill_tokens"] == 50 and snap["pending_decode_tokens"] == 7 + 20
    assert snap["decode_context_tokens"] == 103 and snap["decode_context_max"] == 103
    assert snap["recent_itl_ms"] == pytest.approx(50.0)
    assert snap["recent_ttft_ms"] == pytest.approx(200.0)
    assert snap["decode_tok_rate"] == 2.0  # two decode tokens in the 1 s window
    assert snap["backlog_s"] == pytest.approx(27 / 2.0)
    assert snap["est_request_s"] == pytest.approx((27 / 1 + 5) * 0.050)
    s.finished(1)
    later = s.snapshot(5.0, predicted_output_tokens=5)  # the window has forgotten the old tokens
    assert later["in_flight"] == 1 and later["decode_tok_rate"] == 0.0 and math.isnan(later["recent_itl_ms"])
    assert set(FEATURES) >= set(later) | {"prompt_tokens", "predicted_output_tokens"}


VLLM_METRICS = """# HELP vllm:num_requests_running Number of requests currently running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 7.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.42
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{model_name="m"} %s
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{model_name="m"} 2.0
"""


def test_vllm_metrics_become_features_with_counter_rates():
    raw = parse_metrics(VLLM_METRICS % "1000.0")
    assert raw["vllm:num_requests_running"] == 7.0 and raw["vllm:generation_tokens_total"] == 1000.0
    scraper = MetricsScraper("http://unused/metrics")
    assert all(math.isnan(v) for v in scraper.snapshot().values())  # nothing scraped yet: missing
    scraper._update(10.0, raw)
    scraper._update(10.5, parse_metrics(VLLM_METRICS % "1400.0"))
    snap = scraper.snapshot()
    assert snap["server_running"] == 7.0 and snap["server_waiting"] == 3.0 and snap["server_kv_usage"] == 0.42
    assert snap["server_gen_tok_rate"] == pytest.approx(800.0) and snap["server_preemptions_per_s"] == 0.0
    assert math.isnan(snap["server_prompt_tok_rate"])  # not exported by this server


def test_a_slow_scrape_counts_for_the_phase_it_was_in_flight_during():
    """A scrape sent during a phase that lands after it still saw that phase's load (CI: a saturated
    phase's only scrapes landed after it ended, and its gauges came out NaN)."""
    scraper = MetricsScraper("http://unused/metrics")
    scraper._update(12.0, parse_metrics(VLLM_METRICS % "1000.0"), sent=9.5)  # sent in [9, 10], landed after
    scraper._update(20.0, parse_metrics(VLLM_METRICS % "1000.0"), sent=19.9)  # a later phase's
    assert scraper.seen(9.0, 10.0)["server_running"] == 7.0
    assert math.isnan(scraper.seen(13.0, 19.0)["server_running"])  # nothing in flight then: no gauge
