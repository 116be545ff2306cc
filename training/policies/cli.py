"""`routeforge policies evaluate BUNDLE --trace FILE`: replay a traffic log against every routing
policy a bundle carries and every baseline (`training.policies.replay`).

Registered as a plugin of the runtime's `routeforge` command (entry point group
`routeforge.commands`): the simulator is the pipeline's code, which the runtime in `artifacts/`
cannot import. The trace is read and checked before the bundle is fetched, so a malformed trace
fails at once with one error naming its row and column.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import click
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.artifacts.cli.commands import TRACKING_OPTION, signature_options
from routeforge.artifacts.common import strict_json
from routeforge.artifacts.deciding.objectives import HIGHER_IS_BETTER, objective_option
from routeforge.core.config.training import WeightSearch
from routeforge.core.storage import Quarantine
from routeforge.training.policies.simulator.metrics import DEFAULT_SLO_SCALE, NOT_SERVED
from routeforge.training.policies.simulator.slo import slo_of
from routeforge.training.policies.simulator.traces import (
    MOONCAKE,
    TooFewRows,
    TraceColumns,
    read_block_trace,
    trace_columns,
)

# (metric, column label, digits): every offered request counts in the first five; "served" latencies
# count only what was served and stand beside the served share
SHOWN = (("goodput", "goodput", 3), ("served_share", "served", 3), ("e2e_mean_offered_s", "E2E mean s", 3),
         ("e2e_p99_offered_s", "E2E p99 s", 3), ("qos_mean", "QoS", 3), ("e2e_mean_s", "E2E mean s (served)", 3),
         ("ttft_mean_s", "TTFT mean s (served)", 3))
LABELS = {"e2e_p50_offered_s": "E2E p50 s", "e2e_p95_offered_s": "E2E p95 s", "e2e_p95_s": "E2E p95 s (served)",
          "e2e_p99_s": "E2E p99 s (served)", "slo_attainment": "SLO", "quality_mean": "quality"}
REASONS = {key: reason for reason, key in NOT_SERVED.items()}  # count metric → why


@click.group()
def policies() -> None:
    """Routing policies of a bundle: replay a trace against them."""


@policies.command()
@click.argument("bundle_ref", metavar="BUNDLE")
@click.option("--trace", "trace", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="CSV or JSON-lines request log (Azure's columns unless mapped below).")
@click.option("--load", default=0.8, show_default=True, type=click.FloatRange(min=0, max=10, min_open=True),
              help="Mean arrival rate as a share of the fleet's throughput at saturation on this trace (the better "
                   "of join-shortest-queue and least-work-left with each window offered at once); --load-basis slo: "
                   "of the highest rate at which 99% are served and 90% meet their SLO.")
@click.option("--load-basis", type=click.Choice(["saturation", "slo"]), default="saturation", show_default=True,
              help="What --load is a share of.")
@click.option("--seeds", default=3, show_default=True, type=click.IntRange(min=1),
              help="Windows of the trace replayed per policy (mean ± std over them).")
@click.option("--requests", default=1000, show_default=True, type=click.IntRange(min=2),
              help="Requests per window.")
@click.option("--timestamp", default="TIMESTAMP", show_default=True, help="Timestamp column.")
@click.option("--timestamp-unit", default="datetime", show_default=True,
              type=click.Choice(["datetime", "s", "ms", "us"]))
@click.option("--prompt-tokens", default="ContextTokens", show_default=True, help="Prompt-token column.")
@click.option("--output-tokens", default="GeneratedTokens", show_default=True, help="Output-token column.")
@click.option("--format", "fmt", type=click.Choice(["csv", "jsonl"]), default=None,
              help="Trace format (default: from the file's suffix).")
@click.option("--hash-ids", "hash_ids", default=None,
              help="Column of each prompt's block ids (Mooncake's `hash_ids`): every simulated instance caches "
                   "prompt blocks, so the KV-aware routers find their prefixes. Default: `hash_ids` where the "
                   "trace has that column.")
@click.option("--block-tokens", type=click.IntRange(min=1, max=1 << 20), default=None,
              help="Tokens per hashed block (Mooncake's trace: 512, the default with --hash-ids).")
@click.option("--mooncake", is_flag=True,
              help="The trace is in Mooncake's format: timestamp (ms), input_length, output_length and hash_ids of "
                   "512-token blocks (sets every column option).")
@click.option("--learn", is_flag=True,
              help="Learn linear_scorer's weights (CMA-ES, the pipeline's weight search) on windows of the trace's "
                   "rows after the evaluation windows' and add its row, judged on the evaluation windows.")
@click.option("--learn-evaluations", type=click.IntRange(min=10, max=10_000), default=40, show_default=True,
              help="With --learn: CMA-ES candidates per search (two searches, three training windows each).")
@click.option("--slo-e2e", type=click.FloatRange(min=0, max=86_400, min_open=True), default=None,
              help="Absolute E2E SLO in seconds (default: --slo-scale × each request's unloaded E2E).")
@click.option("--slo-tpot", type=click.FloatRange(min=0, max=3_600, min_open=True), default=None,
              help="TPOT SLO in seconds.")
@click.option("--slo-ttft", type=click.FloatRange(min=0, max=86_400, min_open=True), default=None,
              help="TTFT SLO in seconds.")
@click.option("--slo-scale", type=click.FloatRange(min=1, max=1000), default=DEFAULT_SLO_SCALE, show_default=True,
              help="Without --slo-e2e, a request meets its SLO when its E2E is within this multiple of its E2E "
                   "alone on the idle instance --slo-reference names.")
@click.option("--slo-reference", type=click.Choice(["fastest", "serving"]), default="fastest", show_default=True,
              help="fastest: the idle instance that would serve the request fastest (the same bound wherever it "
                   "goes); serving: the one it was sent to (instance-relative, moves with the router's choice).")
@objective_option("Rank every policy by this on the trace (mean over windows, paired-window noise) and say which "
                  "to deploy and whether the bundle's recommendation holds. Every offered request counts: goodput "
                  "is the share finished within the SLO; *_offered_s latencies count a request not served as "
                  "missing its SLO; served-only latencies (e2e_*_s, ttft_mean_s) rank the policies that served the "
                  "most first. slo_attainment needs --slo-e2e, --slo-tpot or --slo-ttft; qos_mean counts every "
                  "model as quality 1 (a trace has no labels).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@TRACKING_OPTION
@signature_options
def evaluate(bundle_ref: str, trace: Path, load: float, seeds: int, requests: int, timestamp: str,
             timestamp_unit: str, prompt_tokens: str, output_tokens: str, fmt: str | None,
             hash_ids: str | None, block_tokens: int | None, mooncake: bool, learn: bool, learn_evaluations: int,
             slo_e2e: float | None, slo_tpot: float | None, slo_ttft: float | None, slo_scale: float,
             slo_reference: str, load_basis: str, objective: str | None, as_json: bool,
             tracking_uri: str | None,
             public_key: Path | None = None, allow_unsigned: bool = False) -> None:
    """Simulate every policy in BUNDLE (a folder or models:/<name>@<alias>) and every baseline on
    the bundle's tiers under the trace's arrivals, rescaled to LOAD of the fleet's capacity."""
    from routeforge.training.policies.replay import evaluate_bundle  # lazy: gymnasium, numpy on first use

    if objective == "slo_attainment" and slo_e2e is None and slo_tpot is None and slo_ttft is None:
        raise click.UsageError("--objective slo_attainment: give the SLO with --slo-e2e, --slo-tpot and/or --slo-ttft")
    if objective == "quality_mean":
        raise click.UsageError("--objective quality_mean: a trace carries no quality labels (use qos_mean, or the "
                               "pipeline's routing evaluation, which has them)")
    if mooncake:
        columns = dataclasses.replace(MOONCAKE, hash_ids=hash_ids or MOONCAKE.hash_ids,
                                      block_tokens=block_tokens or MOONCAKE.block_tokens)
    else:
        hash_ids = hash_ids or ("hash_ids" if "hash_ids" in (trace_columns(trace, fmt) or ()) else None)
        columns = TraceColumns(timestamp=timestamp, timestamp_unit=timestamp_unit, prompt_tokens=prompt_tokens,
                               output_tokens=output_tokens, format=fmt, hash_ids=hash_ids,
                               block_tokens=(block_tokens or MOONCAKE.block_tokens) if hash_ids else None)
    if columns.hash_ids:
        click.echo(f"prefix caches simulated: block ids from column {columns.hash_ids!r}, {columns.block_tokens} "
                   "tokens per block" + ("" if block_tokens else " (Mooncake's; --block-tokens to change)"), err=True)
    quarantine = Quarantine("traces")
    read = read_block_trace(trace, columns=columns, quarantine=quarantine)  # block size None without block ids
    times, prompt, output = read.times, read.prompt_tokens, read.output_tokens
    for row in quarantine.rows[:5]:
        click.echo(f"skipped {row['row']}: {row['reason']}", err=True)
    if len(quarantine) > 5:
        click.echo(f"skipped {len(quarantine) - 5} more rows that cannot be replayed", err=True)
    if len(times) < 2:
        raise click.UsageError(f"--trace {trace}: {len(times)} row; at least 2 are needed to replay arrivals")
    bundle = load_bundle(bundle_ref, tracking_uri=tracking_uri, public_key=public_key,
                         allow_unsigned=allow_unsigned)
    search = WeightSearch(evaluations=learn_evaluations, restarts=2, episodes=3, validation_episodes=4)
    try:
        report = evaluate_bundle(bundle, times, prompt, output, load=load, seeds=seeds, requests=requests,
                                 slo=slo_of(slo_e2e, slo_tpot, slo_ttft, slo_scale, slo_reference),
                                 log=lambda line: click.echo(line, err=True), objective=objective,
                                 load_basis=load_basis, hash_ids=read.hash_ids, block_tokens=read.block_tokens,
                                 learn=search if learn else None,
                                 learn_objective=objective if objective in HIGHER_IS_BETTER else "ttft_mean_s")
    except TooFewRows as exc:
        raise click.UsageError(f"--learn: {exc} (fewer --seeds or --requests, or a longer trace)") from None
    report["trace"] = str(trace)
    if as_json:  # strict JSON: a metric without a value (no SLO given, no quality labels) is null
        click.echo(strict_json.dumps(report, indent=2, default=float))
        return
    calibration = report["load_calibration"]
    basis = "it serves at saturation" if load_basis == "saturation" else "it sustains within the SLO"
    click.echo(f"{report['bundle']} ({report['bundle_version']}): {len(report['instances'])} simulated instances, "
               f"{report['requests']} requests × {seeds} windows of {trace.name} at {load:g} of the "
               f"{report['capacity_rps']:.3g} req/s {basis} ({report['rate_rps']:.3g} req/s; "
               f"the mean-token estimate was {calibration['mean_token_estimate_rps']:.3g}); "
               f"L = {report['qos_latency_per_token_s']:.3g} s/token")
    click.echo(f"SLO: {report['slo']}")
    ranking = report["ranking"]
    rows = report["rows"]
    metric = ranking["objective"] if ranking is not None else None
    shown = list(SHOWN)
    if report["prefix_cache"]:
        shown.append(("prefix_hit_rate", "prefix hits", 3))
    if metric and metric not in {key for key, _, _ in shown}:
        shown.append((metric, LABELS.get(metric, metric), 3))
    header = ["policy", "source"] + [label for _, label, _ in shown] + ["not served (why)"]
    if ranking is not None:  # best first by the objective, with each policy's gap to the best
        order = {r["policy"]: r for r in ranking["ranking"]}
        rows = sorted(rows, key=lambda r: order[r["policy"]]["rank"] if r["policy"] in order else len(rows) + 1)
        header = ["rank", *header, f"gap ({ranking['objective']})"]
    lines = [header]
    for row in rows:
        cells = [row["policy"] + (" *" if row["recommended"] else ""), row["source"]]
        for key, _, digits in shown:
            mean, std = row[key], row[f"{key}_std"]
            cells.append("inf" if math.isinf(mean) else "—" if not math.isfinite(mean)
                         else f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if math.isfinite(std) else ""))
        cells.append(_not_served(row))
        if ranking is not None:
            ranked = order.get(row["policy"])
            cells = [str(ranked["rank"]) if ranked else "—", *cells, _gap(ranked)]
        lines.append(cells)
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for line in lines:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip())
    click.echo(f"* recommended by the bundle's gate. {report['quality']}.")
    if report["learned"] is not None:
        learned = report["learned"]
        click.echo(f"{learned['row']}: weights {learned['parameters']['weights']} learned for "
                   f"{learned['objective']} on windows of rows {learned['training_rows_from']}+ "
                   f"(kept: {learned['kept']}).")
    if ranking is not None:
        click.echo(ranking["verdict"] + ".")
    if report["slo_note"]:
        click.echo(f"note: {report['slo_note']}.")


def _not_served(row: dict) -> str:
    """Requests not served per window and why (buffer full, larger than the KV cache, ...)."""
    parts = [f"{row[key]:.1f} {label}" for key, label in REASONS.items() if row.get(key)]
    return ", ".join(parts) if parts else "0"


def _gap(ranked: dict | None) -> str:
    """A policy's distance to the best, with the paired noise it is judged against."""
    if ranked is None:
        return "—"
    if ranked["rank"] == 1:
        return "best"
    noise = f" (noise {ranked['paired_noise']:.3g})" if ranked["paired_noise"] is not None else ""
    return f"{ranked['gap_to_best']:+.3g}{noise}"
