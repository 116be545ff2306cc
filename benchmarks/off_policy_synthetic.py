"""The off-policy estimators (`artifacts/operating/off_policy.py`) on synthetic logs with a known answer: bias,
RMSE, mean 95% interval width and coverage of the true value over many seeds (the same generator as
tests/artifacts/test_off_policy.py: a softmax logging policy over three models, a deterministic
challenger, 3,000 logged requests per seed, a reward model with noise 0.05).

    .venv/bin/python -m benchmarks.off_policy_synthetic [--quick]

Writes benchmarks/results/off_policy_synthetic/off_policy_synthetic.json. On dcrouter's labels:
`benchmarks/off_policy_dcrouter.py`.
"""

from __future__ import annotations

import json

import numpy as np
from routeforge.artifacts.operating.off_policy import estimate

from benchmarks.common import parser as bench_parser
from benchmarks.common import results_dir
from tests.artifacts.test_off_policy import synthetic_log


def main() -> None:
    args = bench_parser(__doc__).parse_args()
    seeds = 20 if args.quick else 200
    errors: dict[str, list[float]] = {"ips": [], "snips": [], "dr": []}
    widths: dict[str, list[float]] = {k: [] for k in errors}
    covered = dict.fromkeys(errors, 0)
    for seed in range(seeds):
        actions, propensities, rewards, target, q_hat, truth = synthetic_log(seed)
        found = estimate(actions, propensities, rewards, target, q_hat)
        for name in errors:
            errors[name].append(found[name].value - truth)
            widths[name].append(found[name].high - found[name].low)
            covered[name] += found[name].covers(truth)
    result = {"seeds": seeds, "requests_per_seed": 3000, "level": 0.95,
              "estimators": {name: {"bias": float(np.mean(errors[name])),
                                    "rmse": float(np.sqrt(np.mean(np.square(errors[name])))),
                                    "mean_width": float(np.mean(widths[name])),
                                    "coverage": covered[name] / seeds} for name in errors}}
    path = results_dir("off_policy_synthetic") / "off_policy_synthetic.json"
    path.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
