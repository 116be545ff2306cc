"""How close the simulator comes to measurements it was not told about.

- `static_batches`: every static batch of a profiled tier (splitwise's perf model, or this CPU's
  batch profile) replayed as b requests arriving together; simulated TTFT, TPOT and E2E against the
  measured ones. The tier's fit comes from these same batches, so this checks that the simulator's
  step arithmetic reproduces the fit (and shows where the linear fit itself misses).
- `replay_sweep`: the arrivals of a measured QPS sweep (send times, prompt and output tokens of each
  request) replayed on one simulated instance calibrated by the tier's *batch* profile; simulated
  against measured mean TTFT, TPOT and E2E per offered rate. This is the real test: queueing and
  continuous batching come from the simulator, not from the fit.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from routeforge.profiling.batch_fits import BatchMeasurement
from routeforge.training.policies.simulator.baselines import RoundRobin
from routeforge.training.policies.simulator.cluster import Cluster, Request
from routeforge.training.policies.simulator.instance import InstanceProfile
from routeforge.training.policies.simulator.metrics import summarize


def _ape(sim: float, real: float) -> float:
    return abs(sim - real) / real if real > 0 else float("nan")


def static_batches(profile: InstanceProfile, measurements: list[BatchMeasurement]) -> dict:
    rows = []
    for m in measurements:
        reqs = [Request(i, 0.0, m.prompt_tokens, np.array([m.output_tokens]), np.array([np.nan]))
                for i in range(m.batch_size)]
        outcomes = Cluster([profile]).run(reqs, RoundRobin())
        ttft = float(np.mean([o.ttft for o in outcomes]))
        tpot = float(np.nanmean([o.tpot for o in outcomes])) if m.output_tokens > 1 else float("nan")
        e2e = float(np.mean([o.e2e for o in outcomes]))
        real_e2e = m.e2e_s if m.e2e_s is not None else m.e2e_from(m.prefill_s, m.decode_iter_s)
        rows.append({"batch": m.batch_size, "prompt": m.prompt_tokens, "output": m.output_tokens,
                     "ttft_ape": _ape(ttft, m.prefill_s), "tpot_ape": _ape(tpot, m.decode_iter_s),
                     "e2e_ape": _ape(e2e, real_e2e)})
    return {"batches": len(rows), **{f"{k}_mape": float(np.nanmean([r[k] for r in rows]))
                                     for k in ("ttft_ape", "tpot_ape", "e2e_ape")}, "rows": rows}


def replay_sweep(profile: InstanceProfile, records: pa.Table, phase: str = "rate") -> list[dict]:
    """Per offered rate: measured and simulated mean TTFT, TPOT, E2E (successful requests only)."""
    rows = [r for r in records.to_pylist() if r["phase"] == phase and r["error"] is None]
    out = []
    for rate in sorted({r["rate"] for r in rows}):
        mine = sorted((r for r in rows if r["rate"] == rate), key=lambda r: r["sent_s"])
        start = mine[0]["sent_s"]
        reqs = [Request(i, r["sent_s"] - start, int(r["server_prompt_tokens"]), np.array([int(r["output_tokens"])]),
                        np.array([np.nan])) for i, r in enumerate(mine)]
        sim = summarize(Cluster([profile]).run(reqs, RoundRobin()))
        real = {k: float(np.nanmean([r[f"{k}_s"] for r in mine])) for k in ("ttft", "tpot", "e2e")}
        out.append({"rate": rate, "requests": len(mine),
                    **{f"measured_{k}_s": v for k, v in real.items()},
                    **{f"simulated_{k}_s": sim[f"{k}_mean_s"] for k in ("ttft", "tpot", "e2e")},
                    **{f"{k}_ape": _ape(sim[f"{k}_mean_s"], real[k]) for k in ("ttft", "tpot", "e2e")}})
    return out
