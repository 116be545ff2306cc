"""`bundle replay` at production scale, and against a log one writer tried to steer: 10^6 logged lines
of 10^3 distinct prompts read, deduplicated, share-capped and replayed with a real bundle, timed per
stage (the hardening round had 10^5 lines of 36 prompts not finish in 600 s: every line was
encoded again).

    .venv/bin/python -m benchmarks.replay_scale [--quick] [--bundle REF]

REF defaults to `make demo`'s champion (`models:/routeforge-demo-router@champion` in the state
folder's store). Writes benchmarks/results/replay_scale/replay_scale.json: seconds per stage, peak
memory, and the SNIPS estimate, with and without the share caps, on an honest log and on the same
log with 5,000 lines of one prompt at propensity 0.01 appended (each with an id, a time and a nonce
of its own, so deduplication cannot catch them), with the flags raised.
"""

from __future__ import annotations

import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.artifacts.operating.replay import cap_shares, read_logged_decisions, replay

from benchmarks.common import parser as bench_parser
from benchmarks.common import results_dir


def write_log(path: Path, lines: int, prompts: int, models: list[str], flood: int, seed: int = 0) -> None:
    """`lines` lines: first `flood` near-identical lines of one prompt (propensity 0.01, outcome 1, a
    nonce each), then an ε-greedy serving log (ε = 0.2 over the bundle's models), outcomes a coin per model."""
    rng = np.random.default_rng(seed)
    texts = [f"Question {i}: explain topic {i % 97} in a sentence." for i in range(prompts)]
    quality = {m: 0.3 + 0.4 * k / max(len(models) - 1, 1) for k, m in enumerate(models)}
    with path.open("w") as f:
        # first (within the reader's 10^6-line limit), ids and times of their own: past the deduplication
        usage = {"prompt_tokens": 9, "completion_tokens": 9}
        for j in range(flood):
            f.write(json.dumps({"id": f"steer-{j}", "timestamp": j, "nonce": j, "request": {"prompt": "steer me"},
                                "response": {"model": models[-1], "usage": usage},
                                "routing": {"propensity": 0.01}, "outcome": {"score": 1.0}}) + "\n")
        for i in range(lines - flood):
            text = texts[int(rng.integers(prompts))]
            explore = rng.random() < 0.2
            model = models[int(rng.integers(len(models)))] if explore else models[0]
            propensity = 0.2 / len(models) + (0.8 if model == models[0] else 0.0)
            f.write(json.dumps({"id": f"r{i}", "timestamp": flood + i, "request": {"prompt": text},
                                "response": {"model": model, "usage": {"prompt_tokens": 9, "completion_tokens": 9}},
                                "routing": {"propensity": propensity},
                                "outcome": {"score": float(rng.random() < quality[model])}}) + "\n")


def main() -> None:
    p = bench_parser(__doc__)
    p.add_argument("--bundle", default="models:/routeforge-demo-router@champion")
    args = p.parse_args()
    lines, prompts = (100_000, 1_000) if args.quick else (1_000_000, 1_000)
    bundle = load_bundle(args.bundle)
    out = {"lines": lines, "distinct_prompts": prompts, "bundle": bundle.manifest.name, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, flood in (("honest", 0), ("steered", 5000)):
            log = Path(tmp) / f"{name}.jsonl"
            write_log(log, lines, prompts, bundle.models, flood)
            started = time.perf_counter()
            decisions = read_logged_decisions(log, progress=lambda n: print(f"{n:,} lines read", flush=True))
            read_s = time.perf_counter() - started
            capped = cap_shares(decisions)
            cap_s = time.perf_counter() - started - read_s
            found = replay(bundle, decisions)
            replay_s = time.perf_counter() - started - read_s - cap_s
            uncapped = replay(bundle, decisions, share_caps=False)
            out["runs"][name] = {"usable_lines": len(decisions), "kept_after_caps": len(capped),
                                 "read_s": round(read_s, 1), "cap_s": round(cap_s, 2), "replay_s": round(replay_s, 1),
                                 "snips": round(found.estimates["snips"].value, 4),
                                 "snips_without_caps": round(uncapped.estimates["snips"].value, 4),
                                 "logged_mean": round(found.logged.value, 4), "flags": found.flags}
            print(name, out["runs"][name], flush=True)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    folder = results_dir("replay_scale")
    (folder / ("replay_scale-quick.json" if args.quick else "replay_scale.json")).write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
