"""`routeforge bundle inspect` for people: the few numbers an operator reads, with units, grouped by
what each component is for; every metric of every component behind `--all`.

The manifest holds about 150 metrics for a bundle with a dozen routing policies and three tiers. Printed
bare (`e2e_mape_linear = 0.323161`, `test_router_cost = 3.78e-05`) they said neither the unit nor
which of them matters. Here a metric's unit comes from its name (`_ms`, `_s`, `mape`, `share`,
`cost`), each known component kind gets one line of its headline numbers, the latency heads one line
per tier, and the routing policies the recommended one and the best by simulated QoS.
"""

from __future__ import annotations

from collections.abc import Iterable

from routeforge.artifacts.bundle.manifest import Component, Manifest

MAX_POLICIES_SHOWN = 3  # routing policies named by their simulated QoS, besides the recommended one


def _bytes(n: int) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def with_unit(name: str, value: float) -> str:
    """A metric's value with the unit its name says: ms (per token for TPOT), seconds, a share or a
    percentage error in %, a cost in USD per 1,000 requests, else four significant digits."""
    if value != value:  # NaN: not measured
        return "—"
    base = name.rsplit("/", 1)[-1]
    if "cost" in base:
        return f"${value * 1e3:.3g} per 1k requests"
    if "mape" in base or base.endswith(("share", "gap_closed")) or "agreement" in base:
        return f"{value * 100:.1f}%"
    if "_ms" in base or base.endswith("ms"):
        return f"{value:.3g} ms/token" if "tpot" in base else f"{value:.3g} ms"
    if base.endswith(("_s", "_seconds")):
        return f"{value:.3g} s"
    return f"{value:.4g}"


def _size(component: Component) -> int:
    return sum(f.bytes for f in component.files)


def _m(component: Component, *names: str) -> float | None:
    """The first of `names` the component's metrics hold."""
    return next((component.metrics[n] for n in names if n in component.metrics), None)


def _router_line(c: Component) -> str:
    parts = [f"test quality {c.metrics['test/router']:.3f}" if "test/router" in c.metrics else "no test quality"]
    if "test/best_single" in c.metrics:
        parts.append(f"best single model {c.metrics['test/best_single']:.3f}")
    if "test/oracle" in c.metrics:
        parts.append(f"oracle {c.metrics['test/oracle']:.3f}")
    speed = _m(c, "batch64/per_prompt_ms")
    tail = f"; {speed:.2g} ms per prompt in batches of 64" if speed is not None else ""
    return f"quality router: {', '.join(parts)}{tail}"


def _knn_line(c: Component) -> str:
    quality, best, cost = (_m(c, n) for n in ("test_router_quality", "test_best_single_quality", "test_router_cost"))
    parts = [f"test quality {quality:.3f}" if quality is not None else "no test quality"]
    if best is not None:
        parts.append(f"best single model {best:.3f}")
    if cost is not None:
        parts.append(f"cost {with_unit('cost', cost)}")
    indexed = _m(c, "n_indexed")
    return f"KNN estimator: {', '.join(parts)}" + (f"; {indexed:,.0f} prompts indexed" if indexed is not None else "")


def _predictor_line(c: Component) -> str:
    what = {"length_predictor": "length predictor", "score_predictor": "score predictor",
            "task_classifier": "task classifier"}[c.kind]
    parts = [f"top-1 {with_unit('agreement', v)}" for v in [_m(c, "test_top1")] if v is not None]
    if (mae := _m(c, "test_expected_value_mae")) is not None:
        parts.append(f"expected-value error {mae:.3g}" + (" tokens" if c.kind == "length_predictor" else ""))
    if (ece := _m(c, "test_ece")) is not None:
        parts.append(f"calibration error (ECE) {ece:.3f}")
    if (agree := _m(c, "onnx_top1_agreement")) is not None:
        parts.append(f"ONNX agrees on {with_unit('agreement', agree)}")
    return f"{what}: {', '.join(parts) or 'no test metrics'}"


def _latency_lines(heads: list[Component]) -> list[str]:
    lines = ["latency heads (test error of the heads served):"]
    width = max(len(c.name.removeprefix("latency--")) for c in heads)
    for c in heads:
        ttft = _m(c, "ttft_mae_ms_served", "ttft_mae_ms_linear")
        tpot = _m(c, "tpot_mae_ms_served", "tpot_mae_ms_linear")
        e2e = _m(c, "e2e_mape_served", "e2e_mape_linear")
        cells = [f"TTFT MAE {with_unit('ttft_ms', ttft)}" if ttft is not None else "",
                 f"TPOT MAE {with_unit('tpot_ms', tpot)}" if tpot is not None else "",
                 f"E2E MAPE {with_unit('mape', e2e)}" if e2e is not None else ""]
        lines.append(f"  {c.name.removeprefix('latency--'):<{width}}  " + "  ".join(x for x in cells if x))
    return lines


def _policy_lines(policies: list[Component], simulator: Component | None) -> list[str]:
    lines = [f"routing policies: {len(policies)}, evaluated in the routing simulator"]
    config = simulator.config if simulator is not None else {}
    if config.get("recommended_policy"):
        lines.append(f"  recommended: {config['recommended_policy'].removeprefix('policy--')} by "
                     f"{config.get('objective', 'its objective')} ({config.get('recommendation', '')}); "
                     "per traffic: `routeforge bundle policy`")
    ranked = sorted((p for p in policies if "simulator_qos" in p.metrics), key=lambda p: -p.metrics["simulator_qos"])
    if ranked:
        lines.append("  highest simulated QoS: " + ", ".join(
            f"{p.name.removeprefix('policy--')} {p.metrics['simulator_qos']:.3f}"
            + (f" (mean E2E {with_unit('_s', p.metrics['simulator_e2e_mean_s'])})"
               if "simulator_e2e_mean_s" in p.metrics else "")
            for p in ranked[:MAX_POLICIES_SHOWN]))
    return lines


_ONE_LINE = {"router": _router_line, "knn_estimator": _knn_line,
             "length_predictor": _predictor_line, "score_predictor": _predictor_line,
             "task_classifier": _predictor_line}


def _header(manifest: Manifest, registry: tuple[str, str] | None) -> list[str]:
    lines = [f"bundle {manifest.name}, content digest {manifest.version} (schema {manifest.schema_version})"]
    if registry is not None:
        lines.append(f"registry: {registry[0]} version {registry[1]}")
    total = sum(_size(c) for c in manifest.components)
    lines.append(f"created {manifest.created_at} by routeforge {manifest.code_version}; "
                 f"{len(manifest.components)} components, {_bytes(total)}")
    lines.append(f"fleet {manifest.fleet.name}: {', '.join(m.name for m in manifest.fleet.models)}")
    return lines


def _footer(manifest: Manifest) -> list[str]:
    lineage = manifest.lineage
    inputs = ", ".join(f"{k} {v[:12]}" for k, v in sorted(lineage.input_hashes.items())) or "none recorded"
    runs = [f"{what} run {run}" for what, run in
            (("Dagster", lineage.dagster_run_id), ("MLflow", lineage.mlflow_run_id)) if run]
    isolation = manifest.provenance.code_isolation
    return [f"lineage: inputs {inputs}" + (f"; {', '.join(runs)}" if runs else ""),
            "provenance (signed): code labels " + {
                "required": "from sandboxed code only (scoring.code.isolation: required)",
                "allow_fallback": "may come from code run unconfined (scoring.code.isolation: allow_fallback)",
            }.get(isolation or "", "not said (a bundle from before schema 1.1)")]


def summary(manifest: Manifest, registry: tuple[str, str] | None = None) -> list[str]:
    """The operator's view: a line per estimator, a line per tier's latency heads, the routing policies'
    recommendation and leaders, the rest by name and size."""
    lines = _header(manifest, registry)
    by_kind: dict[str, list[Component]] = {}
    for c in manifest.components:
        by_kind.setdefault(c.kind, []).append(c)
    encoder = by_kind.pop("sentence_encoder", [])
    for c in encoder:
        parity = _m(c, "parity/min_cosine")
        lines.append(f"sentence encoder ({_bytes(_size(c))})"
                     + (f": ONNX parity, least cosine {parity:.4f}" if parity is not None else ""))
    for kind in [k for k in by_kind if k in _ONE_LINE]:
        lines += [_ONE_LINE[kind](c) for c in by_kind.pop(kind)]
    if heads := by_kind.pop("latency_heads", []):
        lines += _latency_lines(heads)
    simulators = by_kind.pop("routing_simulator", [])
    if policies := by_kind.pop("routing_policy", []):
        lines += _policy_lines(policies, simulators[0] if simulators else None)
    rest = [*simulators, *(c for group in by_kind.values() for c in group)]
    if rest:
        lines.append("also: " + ", ".join(f"{c.name} ({_bytes(_size(c))})" for c in rest))
    lines += _footer(manifest)
    lines.append("every metric of every component: --all; the whole manifest: --json")
    return lines


def every_metric(manifest: Manifest, registry: tuple[str, str] | None = None) -> Iterable[str]:
    """Every component with its kind, format, files and size, and each of its metrics with its unit."""
    yield from _header(manifest, registry)
    for c in manifest.components:
        yield f"  {c.name} [{c.kind}, {c.format}] {len(c.files)} files, {_size(c):,} bytes"
        for key, value in sorted(c.metrics.items()):
            yield f"    {key} = {with_unit(key, value)}"
    yield from _footer(manifest)
