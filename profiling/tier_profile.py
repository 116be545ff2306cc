"""Measure or import one tier's latency profile, then turn it into the tier's latency component.

`measure_tier` runs the tier's configured profile kind (`profiling/profile_kinds/`, one module each)
and writes what was measured to a folder; `build_latency_component` trains the heads from it and
writes the bundle component: `heads.json` + XGBoost JSON models (see `artifacts.deciding.latency`) and
`rwt.json` with QLM's parameters and the request groups' μ_o, σ_o.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from routeforge.core.config import FleetConfig, OpenAISource, Tier
from routeforge.core.kinds import ENGINES, PROFILE_KINDS
from routeforge.core.model_sources import causal_lm_location, load_tokenizer
from routeforge.core.progress import Counted
from routeforge.core.schemas import routing_column
from routeforge.profiling.batch_fits import BatchMeasurement, fit_tier
from routeforge.profiling.batch_profiler import profile_model
from routeforge.profiling.latency_heads import write_batch_heads
from routeforge.profiling.plots import plot_batch_fit, plot_head_choice, plot_sweep
from routeforge.profiling.profile_results import FittedPrior, MeasuredBatches, TierProfile, TrafficRecords
from routeforge.profiling.rwt import RwtParams, routing_table_groups
from routeforge.profiling.sweep import SweepPrompt, run_sweep
from routeforge.profiling.sweep_heads import sweep_rwt, train_sweep_heads
from routeforge.profiling.traffic_records import traffic_rwt

Log = Callable[[str], None]


def safe_name(tier: str) -> str:
    return tier.replace("/", "__")


def _model_dir(config: FleetConfig, model: str) -> Path:
    """The folder of a model this machine runs (`transformers` or `vllm` engine), for profiling it here."""
    spec = config.model(model)
    if not ENGINES.entry(spec.engine).metadata.get("local_weights"):
        local = [e.name for e in ENGINES.entries() if e.metadata.get("local_weights")]
        raise ValueError(f"model {model!r} ({spec.engine}): profiling it on this machine needs a model whose "
                         f"weights are here (engine {' or '.join(local)})")
    location, _ = causal_lm_location(spec.source, config.storage.mirror / "models")
    return Path(location)


def measure_batches(config: FleetConfig, tier: Tier, log: Log) -> list[BatchMeasurement]:
    """Static batches in-process with transformers; for a `vllm` model, its weights under
    transformers' implementation (a controlled measurement of the model, not of vLLM's engine)."""
    import torch
    from transformers import AutoModelForCausalLM

    hardware = next(h for h in config.hardware if h.name == tier.hardware)
    device = torch.device("cuda" if hardware.accelerator.startswith(("cuda", "gpu", "nvidia")) else "cpu")
    folder = _model_dir(config, tier.model)
    model = AutoModelForCausalLM.from_pretrained(folder).to(device).eval()
    positions = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
    total = len(config.profiling.batch.batch_sizes) * len(config.profiling.batch.prompt_tokens) * len(
        config.profiling.batch.output_tokens) * config.profiling.batch.repeats
    step = max(1, total // 10)
    return profile_model(model, config.profiling.batch, max_positions=positions,
                         progress=lambda done, n: log(f"{tier.name}: {done}/{n} batches") if done % step == 0 else None)


def write_batches(ms: list[BatchMeasurement], folder: Path, tier: str) -> MeasuredBatches:
    """Static-batch measurements (measured or imported) to `batches.parquet`, with the tier's fit
    and its plot: what the `batch`, `splitwise` and `server_batches` kinds measure."""
    pq.write_table(pa.Table.from_pylist([asdict(m) for m in ms]), folder / "batches.parquet")
    fit = fit_tier(ms)
    return MeasuredBatches(len(ms), fit.to_dict(), str(plot_batch_fit(ms, fit, folder / "batch_fit.png", tier)))


def sweep_prompts(config: FleetConfig, tier: Tier, routing_table: pa.Table, tokenizer) -> list[SweepPrompt]:
    """The fleet's prompts, each asking for the tier model's observed output length (capped)."""
    s = config.profiling.sweep
    lengths = routing_table.column(routing_column("output_tokens", tier.model)).to_pylist()
    out = []
    for text, task, n in zip(routing_table.column("text").to_pylist(), routing_table.column("task").to_pylist(),
                             lengths):
        want = s.default_output_tokens if n is None else max(2, int(n))
        out.append(SweepPrompt(text=text, prompt_tokens=len(tokenizer(text)["input_ids"]),
                               max_tokens=min(want, s.max_output_tokens), group=f"{task}|{tier.model}"))
    return out


def _sweep_progress(tier: str, log: Log):
    """The sweep's (phase, done, total) callback as a count per phase (`core.progress`)."""
    phases: dict[str, Counted] = {}

    def progress(phase: str, done: int, total: int) -> None:
        phases.setdefault(phase, Counted(log, f"{tier} sweep {phase}", total, "requests")).count(done)
    return progress


def run_tier_sweep(config: FleetConfig, tier: Tier, routing_table: pa.Table, folder: Path, log: Log):
    from transformers import AutoTokenizer

    profile = tier.profile
    spec = config.model(tier.model)
    if profile.serve:
        model_dir = _model_dir(config, tier.model)
        prompts = sweep_prompts(config, tier, routing_table, AutoTokenizer.from_pretrained(model_dir))
        # the engine's own OpenAI-compatible server (vLLM's in the vLLM environment, `transformers serve`)
        server = ENGINES.get(spec.engine).local_server(spec, model_dir, folder / "serve.log")
        with server as url:
            return run_sweep(url, str(model_dir), prompts, config.profiling.sweep, tier.name, log=log,
                             progress=_sweep_progress(tier.name, log))
    if profile.base_url is None and not isinstance(spec.source, OpenAISource):
        raise ValueError(f"tiers[{tier.name}].profile: a sweep needs base_url, serve: true, or an openai model")
    base_url = profile.base_url or spec.source.base_url
    served = profile.served_model or (spec.source.model if isinstance(spec.source, OpenAISource) else tier.model)

    prompts = sweep_prompts(config, tier, routing_table, load_tokenizer(config.generation.token_counter))
    return run_sweep(base_url, served, prompts, config.profiling.sweep, tier.name, log=log,
                             progress=_sweep_progress(tier.name, log))


def state_agreement(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How the client's dead-reckoned state at dispatch agrees with the server's own counters
    scraped from /metrics (vLLM's `num_requests_running` / `_waiting`), over the requests that had
    both: the client counts a request in flight from send to last token; the server counts it from
    arrival to finish, with a scrape interval's lag. None without server counters."""
    import numpy as np

    pairs = [(r["f_in_flight"], r["f_server_running"] + r["f_server_waiting"], r["f_waiting_first_token"],
              r["f_server_waiting"]) for r in records
             if r.get("f_server_running") is not None and np.isfinite(r.get("f_server_running"))
             and np.isfinite(r.get("f_server_waiting", np.nan))]
    if len(pairs) < 2:
        return None
    client, server, client_wait, server_wait = (np.asarray(c, dtype=float) for c in zip(*pairs))

    def corr(a, b) -> float | None:
        return float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else None

    return {"requests": len(pairs), "in_flight_mae": float(np.mean(np.abs(client - server))),
            "in_flight_bias": float(np.mean(client - server)), "in_flight_corr": corr(client, server),
            "waiting_mae": float(np.mean(np.abs(client_wait - server_wait))),
            "server_running_max": float(np.max(server - server_wait)), "client_in_flight_max": float(client.max())}


def profile_key(config: FleetConfig, tier: Tier) -> str:
    """sha256 of everything that decides what measuring `tier` would produce: the tier, its model and
    hardware, and the profiling settings. Equal keys: the kept measurements still answer the question."""
    hardware = next((h for h in config.hardware if h.name == tier.hardware), None)
    spec = {"tier": tier.model_dump(mode="json"), "model": config.model(tier.model).model_dump(mode="json"),
            "hardware": hardware.model_dump(mode="json") if hardware else None,
            "profiling": config.profiling.model_dump(mode="json")}
    key_inputs = PROFILE_KINDS.entry(tier.profile.kind).metadata.get("key_inputs") if tier.profile else None
    if key_inputs is not None:  # a traffic log's files: new logs, new measurements
        spec["logs"] = key_inputs(tier.profile)
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def kept_profile(config: FleetConfig, tier: Tier, folder: Path) -> TierProfile | None:
    """The profile measured earlier with the same `profile_key`, or None."""
    path = folder / "profile.json"
    if not path.is_file():
        return None
    summary = json.loads(path.read_text())
    return TierProfile.from_json(summary) if summary.get("profile_key") == profile_key(config, tier) else None


def measure_tier(config: FleetConfig, tier: Tier, routing_table: pa.Table, folder: Path,
                 log: Log = print) -> TierProfile:
    """Measure (or import) the tier into `folder` by its profile kind, and write `profile.json`."""
    profile = tier.profile
    if profile is None:
        raise ValueError(f"tier {tier.name}: no profile configured (tiers[].profile)")
    folder.mkdir(parents=True, exist_ok=True)
    result = PROFILE_KINDS.get(profile.kind)(config, tier, routing_table, folder, log)
    measured = TierProfile(tier.name, profile.kind, profile_key(config, tier), result)
    measured.write(folder)
    return measured


def build_latency_component(config: FleetConfig, tier: Tier, profile_dir: Path, routing_table: pa.Table,
                            folder: Path) -> dict[str, Any]:
    """Train the tier's heads from its measured profile and write the bundle component folder."""
    measured = TierProfile.read(profile_dir).result
    folder.mkdir(parents=True, exist_ok=True)
    max_out = config.generation.sampling.max_tokens
    plots: list[str] = []
    if isinstance(measured, MeasuredBatches):
        ms = [BatchMeasurement(**r) for r in pq.read_table(profile_dir / "batches.parquet").to_pylist()]
        spec = write_batch_heads(ms, folder, tier.name, tuple(config.profiling.residual_quantiles),
                                 seed=config.training.seed)
        fit = spec["fit"]
        rwt = RwtParams(fit["ttft_p_s"], fit["decode_d_s"], fit["epsilon"], fit["theta_tokens_per_s"], max_out)
        evaluation = spec["evaluation"]["held_out"]
        plots += [measured.plot, str(plot_head_choice(evaluation, profile_dir / "heads_held_out.png",
                                                      f"{tier.name}: heads held out by configuration"))]
    elif isinstance(measured, FittedPrior):
        p = measured.prior
        spec = {"tier": tier.name, "kind": "prior", "features": [], "targets": {}, "units": "seconds",
                "prior": {"ttft_s": p["overhead_s"], "tpot_s": p["tpot_s"]}, "residual_quantiles": {},
                "source": "llm_inference_bench coarse E2E fit (prefill folded into TPOT)"}
        (folder / "heads.json").write_text(json.dumps(spec, indent=2))
        rwt = RwtParams(p["overhead_s"], p["tpot_s"], p["epsilon"], p["theta_tok_s"], max_out)
        evaluation = {"r2_batch1": p["r2_batch1"]}
    else:  # request records: a QPS sweep's, or production traffic replayed into the same format
        records = pq.read_table(profile_dir / "sweep.parquet")
        if isinstance(measured, TrafficRecords):
            rwt, sweep = traffic_rwt(records, max_output_tokens=max_out), {}
        else:
            rwt = sweep_rwt(measured.phases,
                            max_output_tokens=min(max_out, config.profiling.sweep.max_output_tokens))
            sweep = {"rwt": rwt, "saturation_rps": measured.saturation_rps}
        spec, _ = train_sweep_heads(records, folder, tier.name, config.profiling.held_out_fraction,
                                    tuple(config.profiling.residual_quantiles), seed=config.training.seed,
                                    plot=profile_dir / "heads_held_out.png", **sweep)
        evaluation = spec["evaluation"]["held_out"]
        plots.append(str(profile_dir / "heads_held_out.png"))
        if sweep:
            plots.append(str(plot_sweep(measured.phases, spec["evaluation"]["rwt_per_rate"],
                                        profile_dir / "sweep.png", tier.name)))
    groups = {g: asdict(s) for g, s in routing_table_groups(routing_table).items() if g.endswith(f"|{tier.model}")}
    (folder / "rwt.json").write_text(json.dumps({"tier": tier.name, "params": rwt.to_dict(), "groups": groups},
                                                indent=2))
    served = {t: {"kind": h["kind"], "why": h["selection"]["why"]} for t, h in spec.get("heads", {}).items()}
    return {"tier": tier.name, "kind": spec["kind"], "folder": str(folder), "evaluation": evaluation,
            "rwt": rwt.to_dict(), "plots": plots, "features": spec["features"], "served": served}
