"""Issue 70, item 1: every policy decides from the router-visible observation, built by one function
(`routeforge.artifacts.deciding.observation.RouterView.observe`) from `/metrics` scrapes and the router's own
sends, in the simulator and in the runtime's dispatcher; a policy that reads anything else fails."""

from __future__ import annotations

import numpy as np
import pytest
from routeforge.artifacts.deciding.observation import OBSERVED, InstanceFacts, ObservationError, RouterView, Scrape
from routeforge.training.policies.simulator.baselines import BASELINES, untrained_baselines
from routeforge.training.policies.simulator.cluster import Cluster, Request
from routeforge.training.policies.simulator.instance import InstanceProfile
from routeforge.training.policies.simulator.router_side import RouterSide

FACTS = InstanceFacts(max_running=4, prefill_intercept_s=0.0, prefill_s_per_token=1e-3, decode_w_s=0.01,
                      decode_h_s_per_token=0.0, kv_capacity_tokens=10_000)


def test_the_observation_splits_the_routers_sends_by_the_scrape_as_vllms_fcfs_scheduler_holds_them():
    """Hand-worked: three sends (t = 0, 1, 2); a scrape at 1.5 counts one running and one waiting. At
    t = 3 the oldest send runs (its generated tokens: (3 − 0 − 100 × 1e-3) / 0.01 = 290, capped at its
    predicted 50 − 1), the second waits, the third (sent after the scrape) waits too."""
    view = RouterView([FACTS])
    for rid, t in enumerate((0.0, 1.0, 2.0)):
        view.sent(0, rid, 100 + rid, 50.0, t)
    view.scraped(0, Scrape(at=1.5, running=1, waiting=1, kv_usage=0.25, prefix_queries=200, prefix_hits=50))
    [inst] = view.observe(3.0)
    assert set(inst) == set(OBSERVED)
    assert inst["running"] == [{"prompt_tokens": 100, "predicted_output_tokens": 50.0, "generated_tokens": 49.0,
                                "sent_at": 0.0, "predicted_quality": 0.0}]
    assert [w["prompt_tokens"] for w in inst["waiting"]] == [101, 102]
    assert inst["queued_prefill_tokens"] == 100 + 101 + 102  # no first token seen yet: all still to prefill
    assert inst["active_tokens"] == pytest.approx(100 + 49 + 101 + 102)
    assert inst["prefix_cache_hit_rate"] == 0.25 and inst["scrape_age_s"] == 1.5 and inst["kv_utilization"] == 0.25
    # the second's first token arrives: it is decoding, whatever the stale scrape says; the first finishes
    view.first_token(1, 2.5)
    view.finished(0)
    [inst] = view.observe(3.0)
    # 1 + 0.5 / 0.01, capped
    assert inst["running"] == [{"prompt_tokens": 101, "predicted_output_tokens": 50.0, "generated_tokens": 49.0,
                                "sent_at": 1.0, "predicted_quality": 0.0}]
    assert [w["prompt_tokens"] for w in inst["waiting"]] == [102] and inst["queued_prefill_tokens"] == 102


def test_requests_the_scrape_counts_beyond_the_routers_own_sends_are_seen_and_stale_sends_are_forgotten():
    view = RouterView([FACTS, FACTS])
    # instance 0: another client's three running and two waiting, before this router sent anything
    view.scraped(0, Scrape(at=0.0, running=3, waiting=2))
    busy, idle = view.observe(0.0)
    assert len(busy["running"]) == 3 and len(busy["waiting"]) == 2 and not idle["running"] and not idle["waiting"]
    assert busy["waiting"][0] == {"prompt_tokens": 512.0, "predicted_output_tokens": 128.0,  # TYPICAL before a send
                                  "sent_at": 0.0, "predicted_quality": 0.0}
    assert view.outstanding() == [5, 0]
    # instance 1: two sends, then a scrape counting one: the older is taken as finished (never reported)
    view.sent(1, "a", 10, 5.0, 1.0)
    view.sent(1, "b", 10, 5.0, 2.0)
    view.scraped(1, Scrape(at=3.0, running=1))
    assert list(view.in_flight[1]) == ["b"] and view.outstanding()[1] == 1


def test_a_field_outside_the_observation_cannot_be_read_by_a_policy():
    view = RouterView([FACTS])
    [inst] = view.observe(0.0)
    with pytest.raises(ObservationError, match="'busy_for_s' is not in the router's observation"):
        inst["busy_for_s"]
    with pytest.raises(ObservationError, match="context_tokens"):
        inst.get("context_tokens", 0)  # not a KeyError: a default does not hide the read
    assert inst.get("cached_prefix_blocks") is None  # what KV events would add: absent, the router's index is used
    assert "busy_for_s" not in inst


PROFILES = [InstanceProfile(0.01, 2e-4, 0.01, 1e-6, max_running=4, kv_capacity_tokens=20_000),
            InstanceProfile(0.02, 1e-4, 0.02, 2e-6, max_running=8, kv_capacity_tokens=40_000)]


def _workload(n=120, shared=True):
    rng = np.random.default_rng(4)
    times = np.cumsum(rng.exponential(0.04, n))
    return [Request(k, float(t), int(rng.integers(200, 1500)), np.array([int(rng.integers(4, 80))] * 2),
                    np.array([0.5, 0.7]), predicted_tokens=np.array([40.0, 40.0]),
                    predicted_quality=np.array([0.5, 0.7]),
                    hash_ids=tuple(range(100 * (k % 5), 100 * (k % 5) + 3)) if shared else ())
            for k, t in enumerate(times)]


@pytest.mark.parametrize("name", sorted(untrained_baselines()))
def test_every_baseline_decides_from_the_routers_side_only(name):
    """Each baseline is handed a `RouterSide` (no path to an `Instance`), every observation it can read
    holds exactly `OBSERVED`, and it serves the workload; a policy reaching for the simulator's state
    through what it is handed fails."""
    seen = []

    class Spy:
        def __init__(self):
            self.inner = BASELINES[name]()

        def assign(self, queue, router, now):
            assert isinstance(router, RouterSide) and not hasattr(router, "cluster")
            assert all(set(i) == set(OBSERVED) for i in router.instances(now))
            seen.append(len(queue))
            return self.inner.assign(queue, router, now)

    outcomes = Cluster(PROFILES, models=[0, 1], block_tokens=100, scrape_interval_s=0.05).run(_workload(), Spy())
    assert seen and sum(o.served for o in outcomes) == len(outcomes)


def test_a_policy_reading_the_simulators_state_fails_unless_it_says_it_is_a_reference():
    class Peeks:
        def assign(self, queue, router, now):
            return [min(range(2), key=lambda i: router.instances(now)[i]["busy_for_s"]) for _ in queue]

    with pytest.raises(ObservationError, match="busy_for_s"):
        Cluster(PROFILES, models=[0, 1]).run(_workload(10), Peeks())

    class Reference:
        reads_simulator_state = True  # a clairvoyant reference says so, and gets the cluster

        def assign(self, queue, cluster, now):
            return [min(range(2), key=lambda i: cluster.instances[i].busy_s) for _ in queue]

    assert all(o.served for o in Cluster(PROFILES, models=[0, 1]).run(_workload(10), Reference()))


def test_the_simulators_scrapes_are_as_stale_as_the_fleet_file_says():
    """A request sent just after a scrape waits in the router's eyes until its first token (at
    0.01 + 2e-4 × 1,000 = 0.21 s) shows it decoding, although the scrape still counts nothing; a scrape
    is taken anew once the last is a second old."""
    cluster = Cluster(PROFILES, models=[0, 1], scrape_interval_s=1.0)
    cluster.router(0.0)
    cluster.route(Request(0, 0.0, 1000, np.array([200, 200]), np.array([0.5, 0.5])), 0, 0.0)
    cluster.advance(0.1)
    [before, _] = cluster.router(0.1).instances()
    assert not before["running"] and len(before["waiting"]) == 1 and before["queued_prefill_tokens"] == 1000
    cluster.advance(0.5)
    [first, _] = cluster.router(0.5).instances()
    assert first["scrape_age_s"] == 0.5 and len(first["running"]) == 1 and not first["waiting"]
    assert first["queued_prefill_tokens"] == 0
    assert first["running"][0]["generated_tokens"] == pytest.approx(1 + (0.5 - 0.21) / 0.01)  # an idle instance's TPOT
    cluster.advance(1.0)
    [fresh, _] = cluster.router(1.0).instances()
    assert fresh["scrape_age_s"] == 0.0
    with pytest.raises(ValueError, match="scrape_interval_s"):
        Cluster(PROFILES, scrape_interval_s=float("nan"))


def _operations(rng: np.random.Generator, n: int = 400) -> list[list]:
    """A random life of a two-instance router view: sends (some sharing prompt blocks), first tokens,
    ends, scrapes (some counting other clients' requests) and observations, in time order."""
    ops, live, t = [], [], 0.0
    for k in range(n):
        t = round(t + float(rng.exponential(0.05)), 6)
        draw = rng.random()
        if draw < 0.35 or not live:
            instance, rid = int(rng.integers(0, 2)), f"r{k}"
            ops.append(["sent", instance, rid, int(rng.integers(1, 3000)), float(rng.integers(1, 400)), t,
                        [int(c) * 100 + b for c in [rng.integers(0, 3)] for b in range(int(rng.integers(0, 6)))],
                        round(float(rng.random()), 4)])
            live.append(rid)
        elif draw < 0.5:
            ops.append(["first", live[int(rng.integers(0, len(live)))], t])
        elif draw < 0.65:
            ops.append(["finished", live.pop(int(rng.integers(0, len(live))))])
        elif draw < 0.85:
            ops.append(["scraped", int(rng.integers(0, 2)), {
                "at": t, "running": int(rng.integers(0, 6)), "waiting": int(rng.integers(0, 4)),
                "kv_usage": round(float(rng.random()), 4), "prefix_queries": int(rng.integers(0, 5000)),
                "prefix_hits": int(rng.integers(0, 1000))}])
        else:
            ops.append(["observe", t])
    return ops


def _replay(view: RouterView, ops: list[list]) -> list:
    out = []
    for op in ops:
        if op[0] == "sent":
            view.sent(*op[1:])
        elif op[0] == "first":
            view.first_token(op[1], op[2])
        elif op[0] == "finished":
            view.finished(op[1])
        elif op[0] == "scraped":
            view.scraped(op[1], Scrape(**op[2]))
        else:
            out.append([i.to_dict() for i in view.observe(op[1])])
    return out


def test_the_typescript_runtime_builds_the_same_observation():
    """runtimes/typescript/src/observation.ts: the same observations, field for field, over a random life
    of sends, first tokens, ends and scrapes; and the same refusal of a field outside it."""
    import json
    import shutil
    import subprocess
    from pathlib import Path

    runtime = Path(__file__).resolve().parents[3] / "runtimes" / "typescript" / "dist" / "observation.js"
    node = shutil.which("node")
    if node is None or not runtime.is_file():
        pytest.skip("the TypeScript runtime is not built (Node.js and `make ts-runtime`): its half is not run")
    facts = [FACTS, InstanceFacts(8, 0.02, 2e-4, 0.02, 3e-6, 50_000)]
    ops = _operations(np.random.default_rng(11))
    expected = _replay(RouterView(facts, block_tokens=100), ops)
    script = ("const {RouterView} = require(process.argv[1]); const fs = require('fs');"
              "const input = JSON.parse(fs.readFileSync(0, 'utf8'));"
              "const view = new RouterView(input.facts, 100); const out = [];"
              "for (const op of input.ops) {"
              " if (op[0] === 'sent') view.sent(op[1], op[2], op[3], op[4], op[5], op[6], op[7]);"
              " else if (op[0] === 'first') view.firstToken(op[1], op[2]);"
              " else if (op[0] === 'finished') view.finished(op[1]);"
              " else if (op[0] === 'scraped') view.scraped(op[1], op[2]);"
              " else out.push(view.observe(op[1])); }"
              "let refused = ''; try { view.observe(0)[0].busy_for_s; } catch (e) { refused = e.message; }"
              "console.log(JSON.stringify({out, refused}));")
    run = subprocess.run([node, "-e", script, str(runtime)],
                         input=json.dumps({"facts": [f.__dict__ for f in facts], "ops": ops}),
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert "'busy_for_s' is not in the router's observation" in got["refused"]
    assert len(got["out"]) == len(expected) > 20
    assert _close(got["out"], expected)


def _close(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    return a == pytest.approx(b, rel=1e-9, abs=1e-9)


def test_llm_ds_predicted_latency_scorer_decides_from_the_routers_side_once_trained():
    """The baseline whose parameters are fitted first (`trained_by`): trained on the router's side of
    training windows, then run on the router's side like the others."""
    from routeforge.training.policies.predicted_latency import fit_parameters
    from routeforge.training.policies.simulator.baselines import tuned_baseline

    def episode(policy, seed):
        return Cluster(PROFILES, models=[0, 1], block_tokens=100, scrape_interval_s=0.05).run(_workload(200), policy)

    parameters = fit_parameters(episode, [0], log=lambda _: None)
    outcomes = episode(tuned_baseline("llm_d_predicted_latency", parameters), 1)
    assert sum(o.served for o in outcomes) == len(outcomes)


def test_a_learned_policys_observation_is_built_from_the_routers_side_and_never_reads_an_instance(monkeypatch):
    """The workload-aware environment (the DDQN's) builds its observation with the runtime's function from
    the router's view: between scrapes it sees the router's own sends and the last scrape, not the
    instances, and every accessor the old observation read of an instance can raise without it noticing."""
    from routeforge.artifacts.deciding.policy_inputs.workload_aware import (
        observation_workload_aware,
        workload_aware_telemetry,
    )
    from routeforge.training.policies.simulator.instance import Instance
    from routeforge.training.policies.simulator.workload_aware_env import WorkloadAwareEnv

    profile = InstanceProfile(prefill_intercept_s=0.0, prefill_s_per_token=1e-3, decode_w_s=0.01,
                              decode_h_s_per_token=0.0, max_running=2, kv_capacity_tokens=10_000, buffer=4)

    def workload(seed):
        return [Request(rid, 0.01 * rid, 100, np.array([40]), np.array([0.5])) for rid in range(6)]

    env = WorkloadAwareEnv([profile] * 2, workload, variant="aware", observe_waiting=True, observe_full=True,
                           scrape_interval_s=1_000.0)  # one scrape, at the first decision
    env.reset(seed=0)
    for _ in range(5):  # five sends to instance 0
        obs, *_ = env.step(0)
    true = env.stepper.cluster.instances[0]
    assert true.n_running >= 1 and true.n_running + true.n_waiting == 5  # the instance's own state ...
    for name in ("generated", "kv_utilization", "cached_prefix_blocks", "scrape"):
        monkeypatch.setattr(Instance, name, lambda *a, _n=name, **k: pytest.fail(f"the observation read {_n}"))
    for name in ("n_running", "n_waiting"):
        monkeypatch.setattr(Instance, name, property(lambda self, _n=name: pytest.fail(f"the observation read {_n}")))
    telemetry = env.telemetry()
    # ... and the router's: the scrape at t = 0 counted nothing, no first token has come (each prefill
    # takes 0.1 s): all five sends wait as far as it can tell, and the queue of four is full
    assert telemetry[0]["waiting"] == 5 and telemetry[0]["full"] and telemetry[0]["running"] == []
    view = env.stepper.cluster.view
    expected = workload_aware_telemetry(view.observe(env.stepper.t), [0.5, 0.5], None, [4, 4])
    assert telemetry == expected
    np.testing.assert_array_equal(obs, observation_workload_aware(
        len(env.stepper.queue), 100, 40.0, expected, env.observation_spec()))
