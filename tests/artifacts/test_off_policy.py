"""The off-policy estimators (issue 52, item 2) on synthetic logs whose answer is known: a logging
policy of known propensities serves three models, a deterministic challenger is replayed, and its
true value is computed from the outcome probabilities. Each estimator's 95% interval must cover the
truth in at least 90% of seeds, and doubly robust must be the tighter with a decent reward model."""

import numpy as np
import pytest
from routeforge.artifacts.operating.off_policy import estimate


def synthetic_log(seed: int, n: int = 3000):
    rng = np.random.default_rng(seed)
    x = rng.random(n)  # a prompt's difficulty
    p_success = np.column_stack([0.9 - 0.8 * x, 0.6 + 0.0 * x, 0.3 + 0.6 * x])  # each model's chance
    logits = np.column_stack([1.0 - x, np.zeros(n), x])  # the logging policy: softmax, known
    logging = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    actions = np.array([rng.choice(3, p=p) for p in logging])
    rows = np.arange(n)
    rewards = (rng.random(n) < p_success[rows, actions]).astype(float)
    challenger = np.where(x < 0.4, 0, np.where(x < 0.7, 1, 2))  # deterministic: one model per prompt
    target = np.eye(3)[challenger]
    truth = float(p_success[rows, challenger].mean())  # its expected outcome on these prompts
    q_hat = np.clip(p_success + rng.normal(0, 0.05, size=p_success.shape), 0, 1)  # a decent reward model
    return actions, logging[rows, actions], rewards, target, q_hat, truth


def test_each_estimator_covers_the_true_value_in_at_least_90_percent_of_seeds():
    seeds = range(40)
    covered = {"ips": 0, "snips": 0, "dr": 0}
    widths = {"ips": [], "dr": []}
    for seed in seeds:
        actions, propensities, rewards, target, q_hat, truth = synthetic_log(seed)
        found = estimate(actions, propensities, rewards, target, q_hat)
        for name in covered:
            covered[name] += found[name].covers(truth)
        for name in widths:
            widths[name].append(found[name].high - found[name].low)
    assert all(count >= 0.9 * len(seeds) for count in covered.values()), covered
    assert np.mean(widths["dr"]) < np.mean(widths["ips"])  # the reward model takes most of the variance


def test_bad_logs_are_refused_naming_the_request():
    actions, propensities, rewards, target, q_hat, _ = synthetic_log(0, n=10)
    propensities = propensities.copy()
    propensities[3] = 0.0
    with pytest.raises(ValueError, match="request 3: propensity 0.0 is not in"):
        estimate(actions, propensities, rewards, target)
    with pytest.raises(ValueError, match="differ in length"):
        estimate(actions[:5], propensities, rewards, target)
