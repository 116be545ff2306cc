"""The routing gate, heuristics exported as specs the runtime executes, and `routeforge policies
evaluate` replaying a trace against a bundle."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.artifacts.bundle.manifest import Fleet, Lineage, ModelEntry
from routeforge.artifacts.bundle.writer import ComponentSource, write_bundle
from routeforge.artifacts.cli.commands import main
from routeforge.artifacts.deciding.heuristics import HeuristicPolicy
from routeforge.training.policies.gate import recommend
from routeforge.training.policies.packaging import export_heuristics, write_simulator
from routeforge.training.policies.simulator.baselines import (
    BASELINES,
    EXPORTABLE,
    RandomPolicy,
    default_baselines,
    heuristic_spec_of,
    untrained_baselines,
)
from routeforge.training.policies.simulator.cluster import Cluster
from routeforge.training.policies.simulator.instance import InstanceProfile
from routeforge.training.policies.simulator.workloads import RequestPool, arrivals

FITS = [{"prefill_intercept_s": 0.005, "prefill_grad_s_per_token": 5e-5, "decode_w_s": 0.01,
         "decode_h_s_per_token": 1e-6},
        {"prefill_intercept_s": 0.01, "prefill_grad_s_per_token": 1e-4, "decode_w_s": 0.03,
         "decode_h_s_per_token": 2e-6}]


def _rows(values: dict[str, dict[str, tuple[float, float]]]) -> list[dict]:
    """{policy: {workload: (mean, std)}} → evaluation rows at load 0.9."""
    return [{"policy": p, "workload": w, "load": 0.9, "qos_mean": m, "qos_mean_std": s}
            for p, cells in values.items() for w, (m, s) in cells.items()]


def test_gate_recommends_a_learned_policy_only_beyond_the_seed_noise():
    heuristic = {"poisson": (0.60, 0.02), "gamma": (0.58, 0.02)}
    clear = recommend(_rows({"join_shortest_queue": heuristic, "round_robin": {"poisson": (0.5, 0.0), "gamma": (0.5, 0.0)},
                             "sac": {"poisson": (0.70, 0.01), "gamma": (0.66, 0.01)}}),
                      learned=["sac"], heuristics=["round_robin", "join_shortest_queue"], trained_on=("poisson", 0.9))
    assert clear["recommended"] == "sac" and clear["kind"] == "learned" and clear["best_heuristic"] == "join_shortest_queue"
    assert clear["margin"] == pytest.approx(0.09) and clear["noise"] == pytest.approx(0.02)
    noisy = recommend(_rows({"join_shortest_queue": heuristic, "sac": {"poisson": (0.62, 0.05), "gamma": (0.60, 0.05)}}),
                      learned=["sac"], heuristics=["join_shortest_queue"], trained_on=("poisson", 0.9))
    assert noisy["recommended"] == "join_shortest_queue" and "within the seed noise" in noisy["reason"]
    # wins on average by more than the noise, but only on the workload it was trained on
    unseen = recommend(_rows({"join_shortest_queue": heuristic, "sac": {"poisson": (0.80, 0.0), "gamma": (0.55, 0.0)}}),
                       learned=["sac"], heuristics=["join_shortest_queue"], trained_on=("poisson", 0.9))
    assert unseen["recommended"] == "join_shortest_queue" and "unseen workloads" in unseen["reason"]
    # lower is better for latency objectives
    rows = [dict(r, e2e_mean_s=r["qos_mean"], e2e_mean_s_std=0.0) for r in
            _rows({"join_shortest_queue": heuristic, "ddqn": {"poisson": (0.3, 0.0), "gamma": (0.3, 0.0)}})]
    assert recommend(rows, ["ddqn"], ["join_shortest_queue"], objective="e2e_mean_s")["recommended"] == "ddqn"
    # per-seed values pair the comparison: both policies see the same arrivals, so a steady lead of
    # 0.03 on seeds whose levels vary by ±0.1 is beyond the noise
    levels = np.array([0.5, 0.6, 0.7])
    paired = [{"policy": p, "workload": w, "load": 0.9, "qos_mean": float((levels + lead).mean()),
               "qos_mean_std": float(levels.std()), "qos_mean_by_seed": list(levels + lead + jitter)}
              for p, lead, jitter in (("join_shortest_queue", 0.0, 0.0), ("sac", 0.03, np.array([0.0, 0.002, -0.002])))
              for w in ("poisson", "gamma")]
    out = recommend(paired, ["sac"], ["join_shortest_queue"], trained_on=("poisson", 0.9))
    assert out["recommended"] == "sac" and out["noise"] < 0.01
    with pytest.raises(ValueError, match="objective 'e2e_mean_ms'"):
        recommend(rows, ["ddqn"], ["join_shortest_queue"], objective="e2e_mean_ms")


def test_exported_heuristics_decide_as_the_simulated_baselines():
    """At every decision of a busy run, each exported spec run by the runtime picks the instance the
    simulator's baseline picks (round-robin's counter aside)."""
    rng = np.random.default_rng(1)
    n, m = 300, 3
    pool = RequestPool(rng.integers(10, 1500, n), rng.integers(1, 400, (n, m)), rng.random((n, m)), ["t"] * n,
                       ["a", "b", "c"], predicted_tokens=rng.integers(1, 400, (n, m)).astype(float),
                       predicted_quality=rng.random((n, m)))
    profiles = [InstanceProfile(0.01, 3e-4 * (k + 1), 0.03, 1e-6, max_running=4, buffer=8, kv_capacity_tokens=20000)
                for k in range(m)]
    names = [name for name in EXPORTABLE if name != "round_robin" and name in untrained_baselines()]
    runtime = {name: HeuristicPolicy.from_spec(heuristic_spec_of(name, m)) for name in names}
    checked = {name: 0 for name in names}

    simulated = {name: BASELINES[name]() for name in names}  # each keeps its state (tie draws) as the runtime's

    class Checking(RandomPolicy):
        def choose(self, request, router, now):
            req, insts = router.observe(request, now)
            for name in names:
                expected = simulated[name].assign([request], router, now)[0]
                assert runtime[name].route(req, insts) == expected, name
                checked[name] += 1
            return super().choose(request, router, now)

    Cluster(profiles, models=[0, 1, 2]).run(pool.requests(arrivals("poisson", 200, rate=6, seed=2), seed=2), Checking())
    assert all(count >= 200 for count in checked.values())
    rr = HeuristicPolicy.from_spec(heuristic_spec_of("round_robin", m))
    assert [rr.route({}, [{}] * m) for _ in range(4)] == [0, 1, 2, 0]
    with pytest.raises(ValueError, match="exported for 3"):
        rr.route({}, [{}] * 2)


def _learned_policy(folder, profiles, workload, qos_graph: bool = False):
    """An untrained 001 network (with `qos_graph`, 000's) exported as a bundle's learned policy (the CLI
    runs it by its spec)."""
    from routeforge.training.policies.rl.export import export_policy
    from routeforge.training.policies.rl.networks import mlp
    from routeforge.training.policies.simulator.qos_graph_env import QosGraphEnv
    from routeforge.training.policies.simulator.workload_aware_env import WorkloadAwareEnv

    env = (QosGraphEnv(profiles, [0, 1], workload, 0.1, pad=3) if qos_graph
           else WorkloadAwareEnv(profiles, workload, variant="guided", models=[0, 1]))
    obs, _ = env.reset(seed=0)
    net = mlp(env.observation_space.shape[0], env.action_space.n)
    export_policy(net, folder, env.observation_spec(), env.action_spec(), obs[None],
                  output="logits" if qos_graph else "q_values")


DEPLOYED = ["llm_d", "dynamo_kv", "sglang_cache_aware"]


@pytest.fixture
def bundle(tmp_path):
    return _bundle(tmp_path, ["join_shortest_queue", "route_balance", "random"])


@pytest.fixture
def deployed_bundle(tmp_path):
    """`bundle` carrying the deployed routers too (JSQ still recommended)."""
    return _bundle(tmp_path, ["join_shortest_queue", "route_balance", "random", *DEPLOYED])


@pytest.fixture
def qos_bundle(tmp_path):
    """`bundle` carrying an untrained 000 (QoS graph) policy besides the 001 one."""
    return _bundle(tmp_path, ["join_shortest_queue"], qos_graph=True)


def _bundle(tmp_path, carried: list[str], qos_graph: bool = False, learned: dict | None = None):
    """A two-instance bundle carrying an untrained 001 policy (with `qos_graph` a 000 one too), the
    `carried` heuristics (join-shortest-queue recommended) and `learned`: name -> a folder a learned
    policy was exported to."""
    from routeforge.training.policies.evaluation import fleet_profiles

    settings = SimpleNamespace(queue_capacity=4, kv_capacity_tokens=50_000, train_load=0.9)
    profiles, _ = fleet_profiles(FITS, settings.queue_capacity, settings.kv_capacity_tokens)
    rng = np.random.default_rng(0)
    pool = RequestPool(rng.integers(20, 400, 50), rng.integers(5, 120, (50, 2)), rng.random((50, 2)), ["t"] * 50,
                       ["fast", "slow"])
    _learned_policy(tmp_path / "src" / "ddqn_workload_guided", profiles,
                    lambda seed: pool.requests(arrivals("poisson", 30, rate=3.0, seed=seed), seed=seed))
    heuristics = export_heuristics(carried, 2, tmp_path / "src")
    gate = {"recommended": "join_shortest_queue", "reason": "the learned policy loses", "objective": "qos_mean"}
    simulator = write_simulator(tmp_path / "src" / "simulator", tiers=["t-fast", "t-slow"], models=["fast", "slow"],
                                instance_models=[0, 1], fits=FITS, settings=settings,
                                report={"qos_latency_per_token_s": 0.1, "capacity_rps": 5.0, "gate": gate})
    components = [ComponentSource("policy--ddqn_workload_guided", "routing_policy", "onnx+json",
                                  tmp_path / "src" / "ddqn_workload_guided",
                                  config={"policy": "ddqn_workload_guided", "policy_kind": "learned", "recommended": False})]
    if qos_graph:
        _learned_policy(tmp_path / "src" / "sac_qos_han", profiles,
                        lambda seed: pool.requests(arrivals("poisson", 30, rate=3.0, seed=seed), seed=seed), True)
        components.append(ComponentSource("policy--sac_qos_han", "routing_policy", "onnx+json",
                                          tmp_path / "src" / "sac_qos_han",
                                          config={"policy": "sac_qos_han", "policy_kind": "learned",
                                                  "recommended": False}))
    components += [ComponentSource(f"policy--{name}", "routing_policy", "onnx+json", folder,
                                   config={"policy": name, "policy_kind": "learned", "recommended": False})
                   for name, folder in (learned or {}).items()]
    components += [ComponentSource(f"policy--{name}", "routing_policy", "json", folder,
                                   config={"policy": name, "policy_kind": "heuristic",
                                           "recommended": name == "join_shortest_queue"})
                   for name, folder in heuristics.items()]
    components.append(ComponentSource("routing_simulator", "routing_simulator", "json", simulator.parent,
                                      config={"recommended_policy": "policy--join_shortest_queue",
                                              "recommendation": gate["reason"], "objective": "qos_mean"}))
    fleet = Fleet(name="t", models=[ModelEntry(name="fast", engine="table_import"),
                                    ModelEntry(name="slow", engine="table_import")])
    write_bundle(tmp_path / "bundle", "t", fleet, components, Lineage(), "test")
    return tmp_path / "bundle"


def test_bundle_recommends_and_returns_its_policy(bundle):
    loaded = load_bundle(bundle, allow_unsigned=True)
    assert sorted(loaded.routing_policies) == ["policy--ddqn_workload_guided", "policy--join_shortest_queue",
                                               "policy--route_balance"]  # random is not exported
    assert loaded.recommended_policy == "policy--join_shortest_queue"
    assert loaded.routing_recommendation["recommendation"] == "the learned policy loses"
    policy = loaded.routing_policy()
    assert isinstance(policy, HeuristicPolicy) and policy.name == "join_shortest_queue"
    idle = {"max_running": 4, "tpot_s": 0.01, "prefill_s_per_token": 1e-4, "running": [], "waiting": []}
    busy = dict(idle, running=[{"predicted_output_tokens": 50, "generated_tokens": 3}])
    assert policy.route({"prompt_tokens": 10, "predicted_output_tokens": [20, 20]}, [busy, idle]) == 1
    assert loaded.routing_policy("policy--ddqn_workload_guided").spec["output"] == "q_values"


def test_policies_evaluate_replays_a_trace_with_other_column_names(bundle, tmp_path):
    rng = np.random.default_rng(3)
    stamps = np.cumsum(rng.exponential(400.0, 120)).astype(int)
    trace = tmp_path / "log.jsonl"
    trace.write_text("".join(json.dumps({"ts_ms": int(t), "in": int(p), "out": int(o)}) + "\n"
                             for t, p, o in zip(stamps, rng.integers(20, 400, 120), rng.integers(5, 120, 120))))
    result = CliRunner().invoke(main, ["policies", "evaluate", str(bundle), "--insecure-skip-signature", "--trace", str(trace), "--timestamp", "ts_ms",
                                       "--timestamp-unit", "ms", "--prompt-tokens", "in", "--output-tokens", "out",
                                       "--load", "0.8", "--seeds", "2", "--requests", "50", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))  # strict
    rows = {r["policy"]: r for r in report["rows"]}
    # the bundle's three policies, then every default baseline it does not carry
    assert {n: r["source"] for n, r in rows.items() if r["source"] == "bundle"} == {
        "ddqn_workload_guided": "bundle", "join_shortest_queue": "bundle", "route_balance": "bundle"}
    assert set(default_baselines()) - {"join_shortest_queue", "route_balance"} == {
        n for n, r in rows.items() if r["source"] == "baseline"}
    assert [n for n, r in rows.items() if r["recommended"]] == ["join_shortest_queue"]
    assert report["requests"] == 50 and report["rate_rps"] == pytest.approx(0.8 * report["capacity_rps"])
    for row in rows.values():
        assert row["served"] + row["dropped"] + row["rejected"] == pytest.approx(50)
        assert 0 <= row["qos_mean"] <= 1
    assert rows["join_shortest_queue"]["e2e_p99_s"] >= rows["join_shortest_queue"]["e2e_mean_s"] > 0
    table = CliRunner().invoke(main, ["policies", "evaluate", str(bundle), "--insecure-skip-signature", "--trace", str(trace), "--timestamp", "ts_ms",
                                      "--timestamp-unit", "ms", "--prompt-tokens", "in", "--output-tokens", "out",
                                      "--seeds", "1", "--requests", "30"])
    assert table.exit_code == 0, table.output
    assert "join_shortest_queue *" in table.stdout and "E2E p99 s" in table.stdout


def test_policies_evaluate_names_the_best_policy_for_the_trace_by_the_objective(bundle, tmp_path):
    """`--objective`: every policy ranked on this trace, the best named, each gap judged against the
    paired-window noise, and whether the bundle's recommendation holds here."""
    rng = np.random.default_rng(5)
    stamps = np.cumsum(rng.exponential(0.3, 200))
    trace = tmp_path / "log.csv"
    trace.write_text("t,p,o\n" + "".join(f"{t:.4f},{p},{o}\n" for t, p, o in
                                         zip(stamps, rng.integers(20, 400, 200), rng.integers(5, 120, 200))))
    args = ["policies", "evaluate", str(bundle), "--insecure-skip-signature", "--trace", str(trace), "--timestamp", "t",
            "--timestamp-unit", "s", "--prompt-tokens", "p", "--output-tokens", "o", "--load", "0.9", "--seeds", "3",
            "--requests", "60"]
    result = CliRunner().invoke(main, [*args, "--objective", "e2e_mean_offered_s", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    ranking = report["ranking"]
    # over offered requests; the policies that served the most (within the noise floor) come first
    assert ranking["objective"] == "e2e_mean_offered_s"
    table_rows = ranking["ranking"]
    top = max(r["served_share"] for r in table_rows)
    full = [r for r in table_rows if not r["serves_less"]]
    assert table_rows[:len(full)] == full and all(top - r["served_share"] <= 0.05 for r in full)
    assert [r["value"] for r in full] == sorted(r["value"] for r in full)
    assert all(len(r["e2e_mean_offered_s_by_seed"]) == 3 for r in report["rows"])
    second = ranking["ranking"][1]
    assert second["gap_to_best"] >= 0 and second["paired_noise"] is not None
    mine = next(r for r in ranking["ranking"] if r["policy"] == "join_shortest_queue")
    assert ranking["recommended"] == "join_shortest_queue"
    assert ranking["recommendation_holds"] == (mine["rank"] == 1 or mine["gap_to_best"] <= mine["paired_noise"])
    assert ranking["verdict"].startswith(f"deploy {ranking['best']}: best e2e_mean_offered_s")

    table = CliRunner().invoke(main, [*args, "--objective", "e2e_mean"])  # the old short name: noted, accepted
    assert table.exit_code == 0, table.output
    assert "note: --objective e2e_mean is e2e_mean_offered_s" in table.stderr
    lines = table.stdout.splitlines()
    assert lines[1].startswith("SLO: E2E ≤ 5 × the request's E2E alone")
    assert lines[2].split()[0] == "rank" and lines[3].split()[:2] == ["1", ranking["best"]]
    assert lines[-1] == ranking["verdict"] + "."
    slo = CliRunner().invoke(main, [*args, "--objective", "slo"])
    assert slo.exit_code == 2 and "--slo-e2e" in slo.output
    typo = CliRunner().invoke(main, [*args, "--objective", "goodputt"])
    assert typo.exit_code == 2 and "unknown objective 'goodputt' (did you mean 'goodput'?)" in typo.output


@pytest.mark.parametrize("content, expected", [
    ("t,p\n1,5\n", "row 1: no column 'o'"),
    ("t,p,o\n1,5,3\n-2,5,3\n4,5,3\n", "skipped bad.csv:3: column 't': timestamp '-2' is negative"),
    ("t,p,o\n5,5,3\n2,5,3\n6,5,3\n", "skipped bad.csv:3: column 't': timestamps go backwards"),
    ("t,p,o\n1,5,3\n2,five,3\n3,5,3\n", "skipped bad.csv:3: column 'p': 'five' is not a token count"),
])
def test_policies_evaluate_names_the_bad_row_and_column(tmp_path, content, expected):
    """A trace without a mapped column is one error; a bad row is skipped with one line naming it
    (here the command then stops at the missing bundle, also in one line)."""
    trace = tmp_path / "bad.csv"
    trace.write_text(content)
    result = CliRunner().invoke(main, ["policies", "evaluate", str(tmp_path / "no-bundle"), "--insecure-skip-signature", "--trace", str(trace),
                                       "--timestamp", "t", "--timestamp-unit", "s", "--prompt-tokens", "p",
                                       "--output-tokens", "o"])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert expected in lines[0]
    assert len(lines) == 1 and str(trace) in lines[0] if "no column" in expected else (
        len(lines) == 2 and "no such folder" in lines[1])


class _DropsEveryFourth:
    """Join-shortest-queue that turns every fourth request away: its served requests wait less."""

    def __init__(self):
        self.inner, self.seen = BASELINES["join_shortest_queue"](), 0

    def assign(self, queue, cluster, now):
        out = []
        for choice in self.inner.assign(queue, cluster, now):
            if choice is not None:
                self.seen += 1
                choice = -1 if self.seen % 4 == 0 else choice
            out.append(choice)
        return out


def test_a_policy_that_rejects_more_never_ranks_above_one_that_serves_more():
    """Every objective counts the requests a policy turns away (issue 49, item 2): on the same windows,
    a policy that drops a quarter of the requests ranks below the one that serves them all, by goodput,
    by every latency over offered requests and by the served-only latencies, in `policies evaluate`'s
    ranking and in the pipeline's gate, although its served requests finish sooner."""
    from routeforge.artifacts.deciding.objectives import HIGHER_IS_BETTER, OLD_NAMES
    from routeforge.training.policies.evaluation import METRICS, fleet_profiles, score
    from routeforge.training.policies.gate import rank_policies
    from routeforge.training.policies.simulator.metrics import mean_std
    from routeforge.training.policies.simulator.slo import Slo

    profiles, _ = fleet_profiles(FITS, 8, 50_000)
    rng = np.random.default_rng(1)
    pool = RequestPool(rng.integers(20, 400, 80), rng.integers(5, 120, (80, 2)), rng.random((80, 2)), ["t"] * 80,
                       ["fast", "slow"])
    rows = []
    for name, make in (("serves_all", BASELINES["join_shortest_queue"]), ("drops_some", _DropsEveryFourth)):
        runs = [score(Cluster(profiles, models=[0, 1]).run(pool.requests(arrivals("poisson", 200, rate=6.0, seed=s),
                                                                          seed=s), make()),
                      np.zeros((2, 2)), 0.1, Slo(scale=5.0, reference="serving"), profiles, [0, 1]) for s in range(4)]
        row = {"policy": name, "workload": "poisson", "load": 0.9}
        for metric, (mean, std) in mean_std(runs, METRICS).items():
            row[metric], row[f"{metric}_std"], row[f"{metric}_by_seed"] = mean, std, [r[metric] for r in runs]
        rows.append(row)
    serves, drops = rows
    assert drops["dropped_by_policy"] == 50 and serves["served_share"] == 1.0
    assert drops["e2e_mean_s"] < serves["e2e_mean_s"]  # the served-only latency flatters the dropper
    assert drops["goodput"] < serves["goodput"] and drops["e2e_p99_offered_s"] == float("inf")
    for objective in sorted({*HIGHER_IS_BETTER, *OLD_NAMES} - {"slo", "slo_attainment", "quality", "quality_mean"}):
        ranking = rank_policies(rows, objective)
        assert ranking["best"] == "serves_all", objective
        assert ranking["ranking"][1]["serves_less"] or not objective.startswith(("e2e", "ttft")), objective
        gate = recommend(rows, ["drops_some"], ["serves_all"], objective=OLD_NAMES.get(objective, objective))
        assert gate["recommended"] == "serves_all", (objective, gate["reason"])


def test_load_is_a_share_of_the_saturation_throughput_or_of_the_rate_the_slo_holds_at(bundle, shared_data):
    """`--load 0.8` on Azure's heavy-tailed conversation trace. By default 0.8 of the fleet's
    throughput at saturation (the better of JSQ and least-work-left, each window offered at once and
    held at the router while every buffer is full: nothing turned away there), so 0.8 is a busy
    fleet; with `--load-basis slo`, 0.8 of the highest rate at which the better one still serves ≥ 99%
    and finishes 90% within their SLO (by search), a lower rate. Every row says how many requests were
    not served and why, and the SLO, the request's own, is stated."""
    trace = shared_data / "traces" / "azure_llm_inference_conv_2023.csv"

    def replay(*extra):
        result = CliRunner().invoke(main, ["policies", "evaluate", str(bundle), "--insecure-skip-signature",
                                           "--trace", str(trace), "--load", "0.8", "--seeds", "2", "--requests",
                                           "400", "--json", *extra])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))

    saturated, within_slo = replay(), replay("--load-basis", "slo")
    calibration = saturated["load_calibration"]
    assert calibration["basis"] == "saturation" and calibration["sustainable_rps"] == saturated["capacity_rps"]
    assert len(calibration["probes"]) == 2 and all(p[1] == 1.0 for p in calibration["probes"])  # all served
    searched = within_slo["load_calibration"]
    assert searched["basis"] == "slo" and len(searched["probes"]) >= 3
    rows = {r["policy"]: r for r in within_slo["rows"]}
    assert max(rows[p]["served_share"] for p in ("join_shortest_queue", "least_work_left")) >= 0.99
    assert saturated["capacity_rps"] > within_slo["capacity_rps"]
    for report in (saturated, within_slo):
        assert report["rate_rps"] == pytest.approx(0.8 * report["capacity_rps"])
        assert report["slo"] == "E2E ≤ 5 × the request's E2E alone on the idle instance that would serve it fastest"
        assert report["ranking"]["objective"] == "goodput"
        for row in report["rows"]:
            reasons = sum(row[k] for k in ("rejected_buffer_full", "rejected_too_large", "rejected_outgrew",
                                           "dropped_by_policy", "dropped_timed_out"))
            assert reasons == pytest.approx(row["dropped"] + row["rejected"])


@pytest.mark.parametrize("flag, value, message", [("--slo-e2e", "-1", "--slo-e2e"), ("--load", "0", "--load"),
                                                  ("--slo-tpot", "0", "--slo-tpot"), ("--load", "1e9", "--load")])
def test_settings_out_of_their_physical_range_are_refused_naming_the_flag(bundle, tmp_path, flag, value, message):
    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6,10,5\n"
                     "2023-11-16 18:15:47.6,10,5\n")
    result = CliRunner().invoke(main, ["policies", "evaluate", str(bundle), "--insecure-skip-signature", "--trace",
                                       str(trace), flag, value])
    assert result.exit_code == 2 and message in result.output


def test_a_trace_row_beyond_any_context_is_quarantined_naming_row_and_column(tmp_path):
    from routeforge.core.storage import Quarantine
    from routeforge.training.policies.simulator.traces import read_trace

    trace = tmp_path / "t.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6,10,5\n"
                     "2023-11-16 18:15:47.6,1000000000000,5\n2023-11-16 18:15:48.6,10,5\n")
    quarantine = Quarantine("traces")
    times, _, _ = read_trace(trace, quarantine=quarantine)
    assert len(times) == 2 and quarantine.rows[0]["row"].endswith(":3")
    assert "ContextTokens" in quarantine.rows[0]["reason"] and "beyond any model's context" in quarantine.rows[0]["reason"]


def test_dispatch_decides_one_request_from_live_instance_states(bundle):
    """`Dispatcher.decide` (issue 49, item 5): the recommended policy (here join-shortest-queue) picks
    the instance, with its predicted TTFT/E2E under the live load, expected quality and cost."""
    from routeforge.artifacts.deciding.dispatch import Dispatcher, LiveState, parse_gauges

    dispatcher = Dispatcher(load_bundle(bundle, allow_unsigned=True))
    assert dispatcher.policy_name == "join_shortest_queue" and not dispatcher.notes
    busy, idle = LiveState(running=4, waiting=3, kv_usage=0.5), LiveState(0, 0, 0.0)
    decision = dispatcher.decide([busy, idle], prompt_tokens=200, quality=[0.9, 0.4], output_tokens=[50, 80])
    assert decision.instance == 1 and decision.model == "slow" and decision.tier == "t-slow"
    assert decision.expected_quality == 0.4 and decision.cost_usd == 0.0  # the fixture's models have no prices
    ttft, e2e = dispatcher.predict_latency([busy, idle], 200, np.array([50.0, 50.0]))
    # the same request waits behind the busy instance's queue; alone it is one prefill and 49 decode steps
    assert ttft[0] > ttft[1] and e2e[0] > e2e[1]
    assert e2e[1] == pytest.approx(0.01 + 1e-4 * 200 + 49 * (0.03 + 2e-6 * (200 + 25)))
    assert decision.predicted_e2e_s == pytest.approx(0.01 + 1e-4 * 200 + 79 * (0.03 + 2e-6 * (200 + 40)))  # 80 tokens
    with pytest.raises(ValueError, match="1 instance states given; the bundle's fleet has 2 instances"):
        dispatcher.decide([idle], 10, [0.5, 0.5], [10, 10])
    with pytest.raises(ValueError, match="LiveState.kv_usage"):
        LiveState(1, 0, 3.0)
    text = ('# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="a"} 3\n'
            'vllm:num_requests_running{model_name="b"} 2\nvllm:num_requests_waiting{model_name="a"} 1.0\n'
            'vllm:kv_cache_usage_perc{model_name="a"} 0.25\n')
    assert parse_gauges(text, ["vllm:num_requests_running"]) == {"vllm:num_requests_running": 5.0}
    assert LiveState.from_vllm_metrics(text) == LiveState(5, 1, 0.25)
    with pytest.raises(ValueError, match="not a vLLM server's metrics"):
        LiveState.from_vllm_metrics("process_cpu_seconds_total 3.0\n")


@pytest.mark.parametrize("name", ["ddqn_workload_guided", "sac_qos_han"])
def test_the_dispatcher_runs_a_learned_policy_from_the_observation_its_environment_builds(qos_bundle, name):
    """Issue 70, item 1: the DDQN (001) and the QoS-graph SAC (000) run in the `Dispatcher` from the
    router-visible observation, built by the function their training environment calls over the
    dispatcher's own view: each decision is the best-scored instance of that observation (their
    wait and drop actions set aside)."""
    import copy

    from routeforge.artifacts.deciding.dispatch import Dispatcher, LiveState
    from routeforge.artifacts.deciding.observation import Scrape
    from routeforge.artifacts.deciding.policy_inputs.qos_graph import observation_qos_graph, qos_graph_telemetry
    from routeforge.artifacts.deciding.policy_inputs.workload_aware import (
        observation_workload_aware,
        workload_aware_telemetry,
    )

    loaded = load_bundle(qos_bundle, allow_unsigned=True)
    dispatcher = Dispatcher(loaded, policy=name)
    assert dispatcher.policy_name == name and not dispatcher.notes
    policy = loaded.routing_policy(f"policy--{name}")
    spec = policy.spec["observation"]
    states = [LiveState(running=3, waiting=1, kv_usage=0.5), LiveState(0, 0, 0.0)]
    quality, tokens = [0.9, 0.4], [50.0, 80.0]
    for k in range(6):
        now, prompt = 0.05 * k, 200 + k
        view = copy.deepcopy(dispatcher.view)
        for i, s in enumerate(states):
            view.scraped(i, Scrape(at=now, running=s.running, waiting=s.waiting, kv_usage=s.kv_usage))
        if name == "sac_qos_han":
            asked = {"prompt_tokens": prompt, "predicted_quality": quality, "predicted_output_tokens": tokens}
            scores = policy.scores(observation_qos_graph(*qos_graph_telemetry(view.observe(now), asked, now, 3),
                                                         spec))[0][1:]  # action 0: drop
        else:
            telemetry = workload_aware_telemetry(view.observe(now), quality)
            scores = policy.scores(observation_workload_aware(0, prompt, 65.0, telemetry, spec))[0][:2]  # 2: wait
        decision = dispatcher.decide(states, prompt_tokens=prompt, quality=quality, output_tokens=tokens, now=now)
        assert decision.instance == int(np.argmax(scores)) and decision.policy == name
    # the last send is in the dispatcher's view, with the quality predicted for it there
    last = list(dispatcher.view.in_flight[decision.instance].values())[-1]
    assert last.predicted_quality == quality[decision.instance] and last.sent_at == now


def test_the_dispatcher_runs_the_deployed_routers_from_live_counts_and_its_own_prefix_index(deployed_bundle):
    """Issue 60, item 4: llm-d, Dynamo and SGLang run in the `Dispatcher` as they run without KV
    events: `/metrics` counts plus an index of what the dispatcher itself sent where. A prompt sent
    again goes where its prefix now is; a new prompt goes by load; KV usage counts for llm-d."""
    from routeforge.artifacts.deciding.dispatch import Dispatcher, LiveState, prompt_blocks

    shared = "You are a careful assistant. Answer in one sentence. " * 6  # 318 characters: 4 blocks
    first, second = prompt_blocks(shared + "What is 2+2?"), prompt_blocks(shared + "Name a colour.")
    assert len(first) == 5 and first[:4] == second[:4] and first[4] != second[4]
    assert prompt_blocks("x" * 63) == [] and len(prompt_blocks("x" * 64 * 300)) == 256
    assert prompt_blocks("ab" * 64)[0] != prompt_blocks("ba" * 64)[0]
    idle = [LiveState(1, 0, 0.1), LiveState(1, 0, 0.1)]
    for name in [*DEPLOYED, "linear_scorer"]:  # and ours, with its starting weights (llm_d_ttft's)
        dispatcher = Dispatcher(load_bundle(deployed_bundle, allow_unsigned=True), policy=name)
        assert dispatcher.policy_name == name
        def send(text, states, tokens):  # decide_prompt without a router: even estimates, the text's blocks
            return dispatcher.decide(states, tokens, [0.5, 0.5], [20, 20], hash_ids=prompt_blocks(text),
                                     block_tokens=16).instance

        where = send(shared + "What is 2+2?", idle, 90)
        again = send(shared + "Name a colour.", idle, 90)
        assert again == where, name  # the shared prefix is cached where the first one went
        # a prompt sharing nothing, with the instance that holds the prefix far busier: the other one
        busy = [LiveState(30, 12, 0.9), LiveState(1, 0, 0.1)] if where == 0 else [LiveState(1, 0, 0.1),
                                                                                      LiveState(30, 12, 0.9)]
        assert send("z" * 200, busy, 50) == 1 - where, name
    llm_d = Dispatcher(load_bundle(deployed_bundle, allow_unsigned=True), policy="llm_d")
    # equal queues, no prefix: the KV-utilisation scorer decides
    assert llm_d.decide([LiveState(2, 0, 0.95), LiveState(2, 0, 0.2)], 50, [0.5, 0.5], [20, 20]).instance == 1
    with pytest.raises(ValueError, match="block_tokens"):
        llm_d.decide(idle, 50, [0.5, 0.5], [20, 20], hash_ids=[1, 2])


@pytest.mark.timeout(900)
def test_dispatch_against_a_vllm_servers_metrics(deployed_bundle, vllm_python, tmp_path):
    """The dispatch call reads a real vLLM server's `/metrics` (its CPU build, on loopback) while
    requests run there, and sends the next request to the idle instance beside it."""
    import threading

    import requests as http
    from routeforge.artifacts.deciding.dispatch import Dispatcher, LiveState, prompt_blocks
    from routeforge.core.config import RandomInitSource
    from routeforge.core.model_sources import build_random_init
    from routeforge.generation.local_server import vllm_serve

    from tests.conftest import VLLM_LLAMA

    model = build_random_init(RandomInitSource(**VLLM_LLAMA), tmp_path / "models")
    dispatcher = Dispatcher(load_bundle(deployed_bundle, allow_unsigned=True))
    with vllm_serve(model, tmp_path / "serve.log", vllm_python, dtype="float32", max_model_len=512,
                    gpu_memory_utilization=0.05, enforce_eager=True,
                    extra_args=["--enable-prefix-caching"]) as url:
        base = url.removesuffix("/v1")
        idle_text = http.get(f"{base}/metrics", timeout=30).text
        assert LiveState.from_vllm_metrics(idle_text).running == 0

        # one request first: the server's first completion initialises what later ones reuse (it took
        # 13 s on a loaded machine, while the gauges showed nothing of the requests behind it)
        http.post(f"{url}/completions", timeout=300, json={"model": str(model), "prompt": "hello", "max_tokens": 1})

        answers = []  # each request's status, said if no scrape ever saw one running
        seen = threading.Event()

        def generate():
            # requests one after another until a scrape has seen the load (at most 8 per thread): a burst
            # sent once could finish before a loaded machine's first scrape answered (the gauges then
            # showed nothing, 1 run in about 3 whole-suite runs)
            for _ in range(8):
                if seen.is_set():
                    return
                answers.append(http.post(f"{url}/completions", timeout=300, json={
                    "model": str(model), "prompt": "hello " * 20, "max_tokens": 480, "ignore_eos": True}).status_code)

        threads = [threading.Thread(target=generate) for _ in range(16)]
        for t in threads:
            t.start()
        busy = LiveState(0, 0)
        # until the engine's gauges show the requests (bounded: 600 × 0.1 s; a loaded 2-core machine
        # took more than the 10 s this waited before); the busiest scrape is kept, so one that came
        # after the requests finished (a slow scrape on a busy machine) does not hide an earlier one.
        for _ in range(600):
            scraped = LiveState.from_vllm_metrics(http.get(f"{base}/metrics", timeout=30).text)
            busy = max(busy, scraped, key=lambda s: s.running + s.waiting)
            if busy.running + busy.waiting >= 2 or not any(t.is_alive() for t in threads):
                break
            threading.Event().wait(0.1)
        seen.set()
        decision = dispatcher.decide([busy, LiveState(0, 0)], 40, [0.5, 0.5], [64, 64])
        # the deployed routers from the same scrape: no prefix is shared yet, so the load decides
        deployed = {name: Dispatcher(load_bundle(deployed_bundle, allow_unsigned=True), policy=name).decide(
            [busy, LiveState(0, 0)], 40, [0.5, 0.5], [64, 64], hash_ids=prompt_blocks("hello " * 20), block_tokens=16)
            for name in DEPLOYED}
        for t in threads:
            t.join(timeout=300)
        check = _simulator_against(url, model, base)
    assert busy.running + busy.waiting >= 2 and 0 < busy.kv_usage <= 1, f"busiest scrape {busy}; answers {answers}"
    assert decision.instance == 1 and decision.predicted_e2e_s > 0
    assert {name: d.instance for name, d in deployed.items()} == {name: 1 for name in DEPLOYED}
    # the simulator, calibrated from this server's own batch profile, on the same 24 requests (a third
    # of each prompt a block shared with others): both serve every one and find the same prefix hits
    assert check["failed"] == 0 and check["simulated_served"] == check["compared"] == 24, check
    assert check["measured_prefix_hit_rate"] > 0.15, check
    assert abs(check["measured_prefix_hit_rate"] - check["simulated_prefix_hit_rate"]) < 0.1, check
    assert all(np.isfinite(check[f"{k}_error"]) for k in ("ttft_mean", "ttft_p95", "e2e_mean", "e2e_p95"))


def _simulator_against(url, model, base) -> dict:
    """Issue 60, item 7's small version (benchmarks/simulator_vs_vllm.py is the whole one)."""
    import requests as http
    from routeforge.profiling.batch_fits import BatchMeasurement, fit_tier
    from routeforge.profiling.server_requests import ReplayRequest, static_batches
    from routeforge.training.policies.simulator.instance import InstanceProfile
    from routeforge.training.policies.simulator.server_replay import replay_check

    vocab = int(json.loads((model / "config.json").read_text())["vocab_size"])
    # blocks of 128 tokens: the CPU build's KV block, so a shared block is a cached one on both sides
    rows = static_batches(url, str(model), [1, 4], [128, 384], 12, 128, vocab)
    profile = InstanceProfile.from_fit(fit_tier([BatchMeasurement(**r) for r in rows]).to_dict(), max_running=16,
                                       kv_capacity_tokens=512 * 16)
    rng = np.random.default_rng(0)
    requests = [ReplayRequest(0.25 * i, (10**6 + int(rng.integers(3)), 2 * i, 2 * i + 1), 12) for i in range(24)]
    return replay_check(url, str(model), profile, requests, 128, vocab, salt=1,
                        metrics=lambda: http.get(f"{base}/metrics", timeout=30).text)


def test_policies_evaluate_caches_a_mooncake_traces_blocks_and_learns_the_scorer_on_its_other_rows(
        deployed_bundle, shared_data, tmp_path):
    """Issue 73, item 6: a Mooncake-format trace's `hash_ids` were not read (every policy's prefix hit
    rate 0.0), and the searchable weights could be learned only in a benchmark script. Now the block
    ids fill each simulated instance's prefix cache, the KV-aware routers are ranked with the rest,
    and `--learn` learns linear_scorer's weights on windows of the rows after the evaluation windows'
    and adds its row beside the defaults'."""
    trace = shared_data / "traces" / "mooncake_synthetic_trace.jsonl"
    args = ["policies", "evaluate", str(deployed_bundle), "--insecure-skip-signature", "--trace", str(trace),
            "--mooncake", "--requests", "120", "--seeds", "2", "--objective", "ttft_mean_s"]
    result = CliRunner().invoke(main, [*args, "--learn", "--learn-evaluations", "10", "--json"])
    assert result.exit_code == 0, result.output
    assert "prefix caches simulated: block ids from column 'hash_ids', 512 tokens per block" in result.stderr
    report = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    rows = {r["policy"]: r for r in report["rows"]}
    assert report["prefix_cache"] == {"block_tokens": 512}
    assert max(r["prefix_hit_rate"] for r in rows.values()) > 0
    ranked = {r["policy"] for r in report["ranking"]["ranking"]}
    assert {"dynamo_kv", "llm_d", "lmetric", "sglang_cache_aware", "linear_scorer", "linear_scorer (learned)"} <= ranked
    assert rows["linear_scorer (learned)"]["source"] == "learned on this trace"
    learned = report["learned"]
    assert learned["objective"] == "ttft_mean_s" and learned["training_rows_from"] == 240
    assert set(learned["parameters"]["weights"]) == set(learned["start"]) and learned["kept"]
    # without --mooncake, a `hash_ids` column is read as block ids all the same, and said so
    part = tmp_path / "part.jsonl"
    part.write_text("".join(trace.read_text().splitlines(keepends=True)[:200]))
    columns = ["--timestamp", "timestamp", "--timestamp-unit", "ms", "--prompt-tokens", "input_length",
               "--output-tokens", "output_length"]
    plain = CliRunner().invoke(main, [*args[:4], "--trace", str(part), *columns, "--requests", "60", "--seeds", "1"])
    assert plain.exit_code == 0, plain.output
    assert "512 tokens per block (Mooncake's; --block-tokens to change)" in plain.stderr
    assert "prefix hits" in plain.stdout


def test_policies_evaluate_says_when_its_slo_does_not_separate_the_policies(bundle, tmp_path):
    """Issue 73, item 6: where 5 × a request's own E2E is a bound almost no request meets whoever
    routes it (short outputs past saturation here; a code service's trace at half its saturation
    once), every policy's goodput below 0.5 is said, with the service-class SLO options that would
    separate them."""
    rng = np.random.default_rng(11)
    stamps = np.cumsum(rng.exponential(0.05, 200))
    trace = tmp_path / "short.csv"
    trace.write_text("t,p,o\n" + "".join(f"{t:.4f},{p},1\n" for t, p in zip(stamps, rng.integers(200, 400, 200))))
    args = ["policies", "evaluate", str(bundle), "--insecure-skip-signature", "--trace", str(trace), "--timestamp", "t",
            "--timestamp-unit", "s", "--prompt-tokens", "p", "--output-tokens", "o", "--seeds", "1",
            "--requests", "150"]
    result = CliRunner().invoke(main, [*args, "--load", "2.0"])
    assert result.exit_code == 0, result.output
    assert "note: every policy's goodput is below 0.5" in result.stdout and "--slo-ttft" in result.stdout
    separated = CliRunner().invoke(main, [*args, "--load", "0.9", "--json"])  # most requests meet it there
    assert json.loads(separated.stdout)["slo_note"] is None
