"""Every routing policy and baseline on the fleet's simulated cluster, over load levels and
workloads, several seeds each: the table and plots behind the `routing_evaluation` asset.

The cluster: one instance per profiled tier, serving that tier's model, with the tier's fitted
prefill/decode gradients and the evaluation's queue limits (the same for every policy). Requests:
the routing table's test prompts with their true per-model output lengths and qualities, and the
KNN estimator's predictions of both (what the policies see). Learned policies (001's workload-guided
double DQN, 000's SAC over the HAN and its baseline RL) are trained here on Poisson arrivals at
`train_load` (SAC policies then act by sampling, as they were trained; the DDQN greedily), then
evaluated with every baseline on every workload, including ones they were not trained on
(gamma-bursty, square-wave, the switched Poisson process, trace replay).
PPO trains `ppo_queue_bias` when it is named: 004's PPO over a bias per instance for
join-shortest-queue, observing what vLLM's `/metrics` show (`QueueStateBiasEnv`), on the fleet's own
continuous-batching instances; the one learned policy `Dispatcher` can run on live servers. 004's
own setting (single-server instances, every request's age observed) is `benchmarks/rl_slot_distribution.py`'s.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from routeforge.artifacts.deciding.heuristics import HEURISTICS
from routeforge.core.kinds import WORKLOADS, workloads_reading
from routeforge.core.progress import Counted
from routeforge.core.storage import Quarantine
from routeforge.prompts.traffic_logs import read_traffic_logs
from routeforge.training.policies.gate import recommend
from routeforge.training.policies.learned.base import LEARNED_POLICIES, Setting, TrainedPolicy
from routeforge.training.policies.load import LoadCalibration, calibrate_on
from routeforge.training.policies.recommendation import recommendation_table, traffic_stats, transfer
from routeforge.training.policies.rl.rollout import evaluation_seeds, run_episode
from routeforge.training.policies.simulator.baselines import BASELINES, EXPORTABLE, default_baselines, tuned_baseline
from routeforge.training.policies.simulator.cluster import Cluster, Outcome
from routeforge.training.policies.simulator.extrapolation import extrapolation
from routeforge.training.policies.simulator.extrapolation import notes as extrapolation_notes
from routeforge.training.policies.simulator.instance import FIT_FLOORS, InstanceProfile
from routeforge.training.policies.simulator.metrics import NOT_SERVED, mean_std, summarize
from routeforge.training.policies.simulator.qos_graph_env import qos
from routeforge.training.policies.simulator.slo import Slo, settings_slo
from routeforge.training.policies.simulator.traces import (
    BlockTrace,
    TraceColumns,
    read_block_trace,
    read_trace,
    trace_window,
)
from routeforge.training.policies.simulator.workloads import RequestPool, arrivals
from routeforge.training.policies.tuning import tune_heuristics
from routeforge.training.policies.weight_search import search_seeds, search_weights

# the papers' three, trained unless `policies` lists others; ppo_queue_bias when named
METRICS = ("goodput", "quality_goodput", "served_share", "e2e_mean_offered_s", "e2e_p50_offered_s", "e2e_p95_offered_s",
           "e2e_p99_offered_s", "e2e_mean_s", "e2e_p50_s", "e2e_p95_s", "e2e_p99_s", "ttft_mean_s",
           "ttft_p95_offered_s", "ttft_p99_offered_s", "tpot_mean_s", "prefix_hit_rate",
           "quality_mean", "qos_mean", "slo_attainment", "cost_usd_per_request", "served", "dropped", "rejected",
           *NOT_SERVED.values())


def fleet_profiles(fits: list[dict], queue_capacity: int, kv_capacity_tokens: int,
                   limits: list[dict] | None = None) -> tuple[list[InstanceProfile], list[str]]:
    """Instance profiles from the tiers' fits, and a note for every fitted term `from_fit` floored
    (a tiny CPU model's prefill gradient is noise-sized and can fit negative). `limits`: per instance,
    its own `kv_capacity_tokens` and `max_running` where the fleet file gives them (its hardware and
    model: `profiling.kv_capacity`; its tier's max_num_seqs and per-step token budget), else the evaluation's."""
    clipped = [f"instance {i}: {key} {value:.3g} clipped to {FIT_FLOORS[key]:g}"
               for i, fit in enumerate(fits) for key, value in InstanceProfile.floored_terms(fit).items()]
    limits = limits or [{}] * len(fits)
    profiles = [InstanceProfile.from_fit(fit, max_running=limit.get("max_running") or queue_capacity,
                                         buffer=queue_capacity,
                                         kv_capacity_tokens=limit.get("kv_capacity_tokens") or kv_capacity_tokens,
                                         **({"max_num_batched_tokens": limit["max_num_batched_tokens"]}
                                            if limit.get("max_num_batched_tokens") else {}))
                for fit, limit in zip(fits, limits)]
    return profiles, clipped


def trace_source(trace) -> tuple[Path, TraceColumns] | None:
    """The configured trace (`training.routing_evaluation.trace`: a path with Azure's columns, or
    `TraceSettings`) as a file and its column mapping."""
    if trace is None:
        return None
    if isinstance(trace, (str, Path)):
        return Path(trace), TraceColumns()
    return Path(trace.path), TraceColumns(**trace.model_dump(exclude={"path"}))


@dataclass(frozen=True)
class Traffic:
    """The fleet's own production requests, in time order: arrival offsets (s) and token counts."""

    times: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    hash_ids: list | None = None  # each prompt's block ids (a block-hash trace's); None: nothing shared known

    def __len__(self) -> int:
        return len(self.times)


def read_traffic(uri: str, quarantine: Quarantine, limit: int | None = None) -> Traffic:
    """The requests of the traffic logs at `uri` (`prompts.traffic_logs`' format) that carry an output
    length, sorted by when they were sent; unusable lines go to `quarantine` with their reason."""
    requests = sorted((r for r in read_traffic_logs(uri, quarantine, limit) if r.completion_tokens > 0),
                      key=lambda r: (r.sent_s, r.row_id))
    if len(requests) < 2:
        raise ValueError(f"training.routing_evaluation.traffic_logs: {len(requests)} replayable request(s) in "
                         f"{uri}; at least 2 with an output length are needed")
    sent = np.array([r.sent_s for r in requests])
    return Traffic(sent - sent[0], np.array([r.prompt_tokens for r in requests], dtype=np.int64),
                   np.array([r.completion_tokens for r in requests], dtype=np.int64))


def traffic_workload(pool: RequestPool, traffic: Traffic, rate: float, n: int):
    """seed → one window of the fleet's own traffic: its arrivals (rescaled to mean `rate`, as the
    trace workload) and its prompt and output token counts (the logged output length on every
    model: a log records one model's); each request takes the quality labels and predicted quality
    of a routing-table test prompt drawn at random, since a log has no per-model labels. Policies see
    the logged output lengths as their length estimates. Where `traffic` has block ids (a block-hash
    trace as the `trace` workload), each request carries its prompt's."""
    if len(traffic) < n + 1:
        raise ValueError(f"training.routing_evaluation.traffic_logs: {len(traffic)} requests, fewer than "
                         f"requests = {n} + 1")

    def replay(seed: int):
        start, offsets = trace_window(traffic.times, n, rate, seed)
        rows = np.random.default_rng(seed).integers(0, len(pool), size=n)
        window = RequestPool(traffic.prompt_tokens[start:start + n],
                             np.repeat(traffic.output_tokens[start:start + n, None], len(pool.models), axis=1),
                             pool.quality[rows], [pool.tasks[r] for r in rows], pool.models, None,
                             None if pool.predicted_quality is None else np.asarray(pool.predicted_quality)[rows])
        requests = window.requests(offsets, seed=seed, in_order=True)
        if traffic.hash_ids is None:
            return requests
        requests = list(requests)
        for request, ids in zip(requests, traffic.hash_ids[start:start + n]):
            request.hash_ids = tuple(ids)
        return requests

    return replay


def workload_factory(kind: str, pool: RequestPool, rate: float, n: int, times: np.ndarray | None,
                     traffic: Traffic | None = None, blocks: BlockTrace | None = None):
    """seed → requests for one of the evaluation workloads at mean `rate`; `times` are the trace's
    arrival offsets (read once by `read_trace`), `traffic` the fleet's own requests, `blocks` the
    trace with its block ids where it has them (the `trace` workload then replays it whole)."""
    entry = WORKLOADS.entry(kind)
    if not entry.metadata.get("arrivals"):  # read from data (training/policies/workload_kinds.py)
        return entry.value(pool, rate, n, times, traffic, blocks)
    return lambda seed: pool.requests(arrivals(kind, n, rate=rate, seed=seed), seed=seed)


def score(outcomes: list[Outcome], prices: np.ndarray, qos_limit_s: float, slo: Slo, profiles,
          models: list[int]) -> dict[str, float]:
    """`summarize` (each request judged by `slo`, relative bounds from `profiles` and each instance's
    model in `models`) plus 000's average QoS and the cost per request (input + output tokens at the
    chosen model's price; 0 for requests not served)."""
    out = summarize(outcomes, slo=slo, profiles=profiles, models=models)
    out["qos_mean"] = float(np.mean([qos(o.job, o.request, o.model, qos_limit_s) if o.job is not None else 0.0
                                     for o in outcomes]))
    cost = [(o.request.prompt_tokens * prices[o.model, 0] + o.job.output_tokens * prices[o.model, 1]) / 1e6
            if o.served else 0.0 for o in outcomes]
    out["cost_usd_per_request"] = float(np.mean(cost))
    out.setdefault("slo_attainment", float("nan"))
    return out


@dataclass
class RoutingEvaluation:
    """What `evaluate_routing` returns. The tables (`rows`, the gates, `recommendations`) stay rows of
    plain values: they are written as they are to `routing_evaluation.json` (`report()`), read by the
    plots, the simulator file and the bundle's recommendation component."""

    rows: list[dict[str, Any]]  # one per policy × workload × load: mean and std over seeds of each metric
    gate: dict[str, Any]  # `gate.recommend` over every workload: the recommended policy and why
    gate_by_workload: dict[str, dict[str, Any]]  # the same, one workload at a time
    recommendations: list[dict[str, Any]]  # per evaluated traffic: its online statistics and best policies
    transfer: dict[str, Any]  # how those recommendations hold on a workload left out
    trained: dict[str, TrainedPolicy] = field(repr=False)  # the learned policies, for export
    # per heuristic `tune` named: the parameters chosen on training windows, the objective, what was tried
    tuned: dict[str, dict[str, Any]]
    capacity_rps: float  # the rate Poisson arrivals sustain on the fleet
    load_calibration: dict[str, LoadCalibration]  # per workload
    train_workloads: list[str]
    train_load: float
    slo: str
    clipped_fits: list[str]  # fitted terms floored (noise-sized, negative)
    qos_latency_per_token_s: float
    seeds: list[int]  # the evaluation's (never a training seed)
    requests: int  # per episode
    trace_quarantined: int
    traffic_requests: int | None  # the fleet's own logs replayed, when it has them
    # per instance: the longest prompt its tier's fit measured, the longest the workloads have, their ratio
    extrapolation: dict[str, dict[str, Any]] = field(default_factory=dict)
    plots: list[str] = field(default_factory=list)  # written last, from the rest

    @property
    def recommended(self) -> str:
        return self.gate["recommended"]

    def report(self) -> dict[str, Any]:
        """The JSON form (`routing_evaluation.json`; its keys in the order the file has always had)."""
        return {"capacity_rps": self.capacity_rps, "train_workloads": self.train_workloads,
                "load_calibration": {k: c.to_dict() for k, c in self.load_calibration.items()},
                "slo": self.slo, "clipped_fits": self.clipped_fits,
                "qos_latency_per_token_s": self.qos_latency_per_token_s, "seeds": self.seeds,
                "requests": self.requests, "train_load": self.train_load,
                "trace_quarantined": self.trace_quarantined, "extrapolation": self.extrapolation, "rows": self.rows,
                "learning_curves": {n: t.run.curve for n, t in self.trained.items()},
                "pretrain": {n: t.run.pretrain for n, t in self.trained.items()},
                "training": {n: t.training() for n, t in self.trained.items()},
                "gate": self.gate, "gate_by_workload": self.gate_by_workload,
                "recommendations": self.recommendations, "transfer": self.transfer,
                "traffic_requests": self.traffic_requests, "plots": self.plots,
                "tuned_heuristics": self.tuned}

    def heuristic_parameters(self) -> dict[str, dict[str, Any]]:
        """The parameters each tuned heuristic was evaluated with (what its exported spec must carry)."""
        return {name: dict(t["parameters"]) for name, t in self.tuned.items()}


@dataclass
class _Fleet:
    """What every step of one evaluation shares: the simulated instances, where requests come from, and
    how an episode is scored."""

    profiles: list[InstanceProfile]
    models: list[int]
    pool: RequestPool
    prices: np.ndarray
    settings: Any
    slo: Slo
    qos_limit: float
    times: np.ndarray | None = None  # the trace's arrival offsets, where one was read
    traffic: Traffic | None = None
    blocks: BlockTrace | None = None
    block_tokens: int | None = None

    def workload(self, kind: str, rate: float):
        """seed → requests of workload `kind` at mean `rate` (`workload_factory`)."""
        return workload_factory(kind, self.pool, rate, self.settings.requests, self.times, self.traffic, self.blocks)

    def simulate(self, requests, policy) -> list[Outcome]:
        # a block trace's prefixes are cached by every instance, the learned policies' environments' as
        # the baselines' (`Setting.block_tokens`)
        return Cluster(self.profiles, models=self.models, block_tokens=self.block_tokens,
                       scrape_interval_s=self.settings.scrape_interval_s).run(requests, policy)

    def score(self, outcomes: list[Outcome]) -> dict[str, float]:
        return score(outcomes, self.prices, self.qos_limit, self.slo, self.profiles, self.models)


def _request_sources(pool: RequestPool, settings, quarantine: Quarantine, log: Callable[[str], None]):
    """(pool, trace arrival offsets, block trace, block tokens, trace prompt lengths): the trace read
    where a workload replays it or the pool takes its lengths from it (a score table has none)."""
    trace = trace_source(settings.trace)
    times = blocks = block_tokens = trace_prompt = None
    use_trace_lengths = settings.lengths == "trace" or (settings.lengths == "auto" and not pool.has_lengths)
    reads_trace = bool(set(settings.workloads) & set(workloads_reading("trace")))
    if trace is not None and (reads_trace or use_trace_lengths):
        if trace[1].hash_ids is not None:  # Mooncake's format: token counts and shared prefixes too
            blocks = read_block_trace(trace[0], columns=trace[1], quarantine=quarantine)
            times, trace_prompt, trace_output = blocks.times, blocks.prompt_tokens, blocks.output_tokens
            block_tokens = blocks.block_tokens
            log(f"trace {trace[0].name}: {blocks.repeated_block_share():.0%} of prompt blocks repeat an earlier "
                f"one; instances cache {block_tokens}-token blocks")
        else:
            times, trace_prompt, trace_output = read_trace(trace[0], columns=trace[1], quarantine=quarantine)
        if len(quarantine):
            log(f"warning: trace {trace[0].name}: {len(quarantine)} rows quarantined "
                f"(first: {quarantine.rows[0]['row']}: {quarantine.rows[0]['reason']})")
        if use_trace_lengths:  # a score table has no output lengths: the traffic's length mix instead
            pool = pool.with_lengths_from(trace_prompt, trace_output, seed=settings.seed)
            log(f"token counts resampled from {trace[0].name} ({len(trace_prompt)} requests): "
                f"prompt mean {trace_prompt.mean():.0f}, output mean {trace_output.mean():.0f}")
    elif settings.lengths == "trace":
        raise ValueError("training.routing_evaluation.lengths: trace needs training.routing_evaluation.trace")
    return pool, times, blocks, block_tokens, trace_prompt


def _extrapolated(fits: list[dict], pool: RequestPool, trace_prompt, traffic: Traffic | None,
                  log: Callable[[str], None]) -> list[dict]:
    """How far each instance's fit is used beyond the prompt lengths it was fitted on (said as warnings)."""
    longest = max([float(pool.prompt_tokens.max())]
                  + ([float(np.max(trace_prompt))] if trace_prompt is not None else [])
                  + ([float(np.max(traffic.prompt_tokens))] if traffic is not None and len(traffic) else []))
    stretched = extrapolation(fits, [f"instance {i}" for i in range(len(fits))], longest)
    for note in extrapolation_notes(stretched):
        log(f"warning: {note}")
    return stretched


def _policies_to_run(settings) -> list[str]:
    """`settings.policies`, else the default baselines and learned policies; an unknown name is an error."""
    learned_names = LEARNED_POLICIES.names()
    wanted = settings.policies or [*default_baselines(), *(e.name for e in LEARNED_POLICIES.entries()
                                                          if e.metadata["default"])]
    for name in wanted:
        if name not in BASELINES and name not in learned_names:
            raise ValueError(f"training.routing_evaluation.policies: unknown policy {name!r} "
                             f"(baselines {sorted(BASELINES)}, learned {learned_names})")
    return wanted


def _calibrate(fleet: _Fleet, workloads: list[str], families: list[str], seeds: list[int],
               log: Callable[[str], None]) -> dict[str, LoadCalibration]:
    """The rate each workload's arrivals sustain on the fleet (`training.policies.load`): Poisson's
    first (the capacity), then every evaluated workload and every training family."""
    pool, settings = fleet.pool, fleet.settings
    estimate = sum(p.capacity_rps(pool.prompt_tokens.mean(), pool.output_tokens[:, m].mean())
                   for p, m in zip(fleet.profiles, fleet.models))

    def calibrate(kind: str) -> LoadCalibration:
        return calibrate_on(fleet.profiles, fleet.models, lambda rate, seed: fleet.workload(kind, rate)(seed),
                            estimate, seeds, fleet.slo, settings.load_basis, block_tokens=fleet.block_tokens,
                            log=lambda line: log(f"{kind}: {line}"))

    calibrations = {kind: calibrate(kind) for kind in dict.fromkeys(["poisson", *workloads])}
    for kind in families:
        if kind not in calibrations:
            calibrations[kind] = calibrate(kind)
    return calibrations


def _fit_heuristics(fleet: _Fleet, wanted: list[str], train_workload, log: Callable[[str], None]) -> dict[str, dict]:
    """Each heuristic's parameters chosen on training windows: the `tune` grid, the `weight_search`
    CMA-ES, or the heuristic's own trainer (`trained_by`, llm-d's latency model)."""
    settings = fleet.settings

    def training_episode(policy, seed: int) -> dict[str, float]:
        return fleet.score(fleet.simulate(train_workload(seed), policy))

    tuned = tune_heuristics(settings, training_episode, log)
    tuned.update({name: search_weights(name, search, settings.objective, settings.seed, training_episode, log)
                  for name, search in settings.weight_search.items()})
    for name in (n for n in wanted if n in HEURISTICS and n not in tuned):
        trainer = HEURISTICS.entry(name).metadata.get("trained_by")
        if trainer:  # a heuristic that learns its parameters (llm-d's latency model) on the training windows
            fit = getattr(importlib.import_module(trainer[0]), trainer[1])
            fit_seeds = search_seeds(settings.seed, 0, settings.tune_episodes)
            tuned[name] = {"parameters": fit(lambda policy, s: fleet.simulate(train_workload(s), policy), fit_seeds,
                                             log),
                           "method": "trained", "training_episodes": len(fit_seeds)}
    return tuned


def _evaluate_policies(fleet: _Fleet, setting: Setting, wanted: list[str], workloads: list[str],
                       calibrations: dict[str, LoadCalibration], seeds: list[int], trained: dict[str, TrainedPolicy],
                       tuned: dict[str, dict], log: Callable[[str], None]):
    """(rows, traffic statistics): every policy × workload × load over the evaluation's `seeds`, one row
    of mean ± std per metric (and the objective and served share per seed, which the gate pairs)."""
    settings = fleet.settings

    def baseline(name: str):
        """The simulator policy of baseline `name`: with its tuned parameters where `tune` chose some."""
        return tuned_baseline(name, tuned[name]["parameters"]) if name in tuned else BASELINES[name]()

    rows = []
    stats: dict[tuple[str, float], dict[str, float]] = {}  # each evaluated traffic's online statistics
    episodes = Counted(log, "routing evaluation", len(workloads) * len(settings.loads) * len(wanted) * len(seeds),
                       "episodes")
    for kind in workloads:
        for load in settings.loads:
            workload = fleet.workload(kind, load * calibrations[kind].rate_rps)
            windows = [traffic_stats(workload(seed)) for seed in seeds]
            stats[(kind, load)] = {k: float(np.mean([w[k] for w in windows])) for k in windows[0]}
            for name in wanted:
                runs = []
                for seed in seeds:
                    if name in trained:  # each acts as its module says (SAC by sampling, the DDQN greedily)
                        policy = LEARNED_POLICIES.get(name)
                        act = policy.actor(trained[name].run.network, seed, settings)
                        outcomes = run_episode(policy.environment(setting, workload), act, seed)
                    else:
                        outcomes = fleet.simulate(workload(seed), baseline(name))
                    runs.append(fleet.score(outcomes))
                    episodes.advance(detail=f"({kind} at {load:.0%} load, {name})")
                row = {"policy": name, "workload": kind, "load": load}
                for metric, (mean, std) in mean_std(runs, METRICS).items():
                    row[metric], row[f"{metric}_std"] = mean, std
                for metric in dict.fromkeys([settings.objective, "served_share"]):  # the gate pairs seeds
                    row[f"{metric}_by_seed"] = [r.get(metric, float("nan")) for r in runs]
                rows.append(row)
    return rows, stats


def _gates(rows: list[dict], stats, wanted: list[str], trained: dict[str, TrainedPolicy], workloads: list[str],
           families: list[str], settings, log: Callable[[str], None]):
    """(gate, gate per workload, recommendation table, its held-out transfer): the policy to deploy over
    every workload, where traffic looks like each one, and per traffic by what a router counts online."""
    learned = [p for p in wanted if p in trained]
    heuristics = [p for p in wanted if p in EXPORTABLE]
    # one family: the other workloads are the unseen ones; several: every workload is judged on held-out windows
    trained_on = (families[0], settings.train_load) if len(families) == 1 else None
    gate = recommend(rows, learned=learned, heuristics=heuristics, objective=settings.objective, trained_on=trained_on)
    log(f"routing gate: recommends {gate['recommended']} ({gate['reason']})")
    # and per workload: the policy to deploy where traffic looks like that workload (the fleet's own
    # traffic included, when its logs are replayed)
    by_workload = {}
    for kind in workloads:
        one = recommend([r for r in rows if r["workload"] == kind], learned=learned, heuristics=heuristics,
                        objective=settings.objective, trained_on=trained_on)
        by_workload[kind] = {k: one[k] for k in ("recommended", "kind", "reason", "margin", "noise")}
        log(f"routing gate on {kind}: {one['recommended']}")
    # per traffic: which carried policy to use, by what a router can count online (artifacts.deciding.recommendation)
    recommendations = recommendation_table(rows, stats, [p for p in wanted if p in trained or p in EXPORTABLE])
    held_out = transfer(rows, recommendations, settings.objective)
    if held_out["mean_gap"] is not None:
        log(f"recommendation by traffic, each workload left out: {settings.objective} within "
            f"{held_out['mean_gap']:.1%} of the best on average (worst {held_out['max_gap']:.1%})")
    return gate, by_workload, recommendations, held_out


def evaluate_routing(pool: RequestPool, fits: list[dict], models: list[int], prices: np.ndarray, settings,
                     out_dir: Path, log: Callable[[str], None] = print, quarantine: Quarantine | None = None,
                     traffic: Traffic | None = None, limits: list[dict] | None = None) -> RoutingEvaluation:
    """Train the learned policies, run every policy × workload × load × seed, write plots; returns
    the rows of mean ± std per metric, the gate over every workload and per workload, the
    recommendation table, plot paths, and the trained networks with the environment each was
    trained in (for export). Trace rows that cannot be replayed go to `quarantine` (the caller writes it).
    With `traffic` (the fleet's own logs, `read_traffic`), its replay is one more workload,
    "traffic", whatever `settings.workloads` lists. `limits`: per instance, the KV capacity and batch
    limit the fleet file gives (`fleet_profiles`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    profiles, clipped = fleet_profiles(fits, settings.queue_capacity, settings.kv_capacity_tokens, limits)
    slo = settings_slo(settings)
    for note in clipped:
        log(f"warning: {note}")
    qos_limit = settings.qos_latency_per_token_s or 3.0 * float(np.median([p.nominal_tpot() for p in profiles]))
    quarantine = quarantine if quarantine is not None else Quarantine("routing_evaluation")
    pool, times, blocks, block_tokens, trace_prompt = _request_sources(pool, settings, quarantine, log)
    stretched = _extrapolated(fits, pool, trace_prompt, traffic, log)
    wanted = _policies_to_run(settings)
    fleet = _Fleet(profiles, models, pool, prices, settings, slo, qos_limit, times, traffic, blocks, block_tokens)
    seeds = evaluation_seeds(settings.seed, settings.seeds)
    # the fleet's own traffic is one more workload whenever it was read, listed or not
    replayed = workloads_reading("traffic_logs") if traffic is not None else []
    workloads = [*settings.workloads, *(kind for kind in replayed if kind not in settings.workloads)]
    # learned policies train over workload families (each episode one of them, by its seed), every one at
    # train_load × its own sustainable rate; they are judged on the evaluation's seeds, windows they never saw
    families = settings.train_workloads or ["poisson"]
    calibrations = _calibrate(fleet, workloads, families, seeds, log)
    capacity = calibrations["poisson"].rate_rps
    factories = [fleet.workload(kind, settings.train_load * calibrations[kind].rate_rps) for kind in families]

    def train_workload(seed: int):
        return factories[seed % len(factories)](seed)

    setting = Setting(profiles, models, qos_limit, pool.quality.mean(axis=0)[models], capacity, settings,
                      block_tokens)
    tuned = _fit_heuristics(fleet, wanted, train_workload, log)
    trained: dict[str, TrainedPolicy] = {}
    for name in (p for p in wanted if p in LEARNED_POLICIES.names()):
        trained[name] = LEARNED_POLICIES.get(name).train(setting, train_workload, log)
        log(f"{name}: trained in {trained[name].seconds:.0f} s")
    rows, stats = _evaluate_policies(fleet, setting, wanted, workloads, calibrations, seeds, trained, tuned, log)
    gate, by_workload, recommendations, held_out = _gates(rows, stats, wanted, trained, workloads, families,
                                                          settings, log)
    evaluation = RoutingEvaluation(
        rows=rows, gate=gate, gate_by_workload=by_workload, recommendations=recommendations, transfer=held_out,
        trained=trained, tuned=tuned, capacity_rps=capacity, load_calibration=calibrations, train_workloads=families,
        train_load=settings.train_load,
        slo=slo.describe(),
        clipped_fits=clipped, qos_latency_per_token_s=qos_limit, seeds=seeds, requests=settings.requests,
        trace_quarantined=len(quarantine), traffic_requests=len(traffic) if traffic is not None else None,
        extrapolation=stretched)
    evaluation.plots = [str(p) for p in plot_evaluation(evaluation, out_dir)]
    return evaluation


def plot_evaluation(evaluation: RoutingEvaluation, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = evaluation.rows
    workloads = sorted({r["workload"] for r in rows})
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    paths = []
    top = max(r["load"] for r in rows)
    fig, axes = plt.subplots(1, len(workloads), figsize=(5 * len(workloads), 4.5), squeeze=False)
    for ax, kind in zip(axes[0], workloads):  # latency percentiles at the highest load
        sel = {r["policy"]: r for r in rows if r["workload"] == kind and r["load"] == top}
        x = np.arange(len(policies))
        for j, q in enumerate(("e2e_p50_s", "e2e_p95_s", "e2e_p99_s")):
            ax.bar(x + (j - 1) * 0.27, [sel[p][q] for p in policies], 0.27, label=q)
        ax.set_xticks(x, policies, rotation=35, ha="right", fontsize=7)
        ax.set(title=f"{kind}, load {top:.0%}", ylabel="E2E (s)")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    paths.append(out_dir / "latency_percentiles.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    metrics = ("qos_mean", "slo_attainment", "quality_mean", "cost_usd_per_request", "dropped", "rejected")
    fig, axes = plt.subplots(len(workloads), len(metrics), figsize=(3.6 * len(metrics), 3.2 * len(workloads)),
                             squeeze=False)
    for i, kind in enumerate(workloads):  # each metric against load, one line per policy (mean ± std)
        for ax, metric in zip(axes[i], metrics):
            for p in policies:
                pts = sorted((r["load"], r[metric], r[f"{metric}_std"]) for r in rows
                             if r["workload"] == kind and r["policy"] == p)
                ax.errorbar([a for a, _, _ in pts], [b for _, b, _ in pts], yerr=[c for _, _, c in pts],
                            marker="o", ms=3, lw=1, capsize=2, label=p)
            ax.set(title=f"{kind}: {metric}", xlabel="load")
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    paths.append(out_dir / "metrics_by_load.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    if evaluation.trained:
        fig, ax = plt.subplots(figsize=(6, 4))
        for name, trained in evaluation.trained.items():
            curve = trained.run.curve
            ax.plot([c["steps"] for c in curve], [c["return"] for c in curve], "-o", ms=3, label=name)
        ax.set(xlabel="environment steps", ylabel="episode return", title="learning curves")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        paths.append(out_dir / "learning_curves.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths
