"""Router selection at 10^6 prompts: the KNN member under a key budget (`knn_max_keys`), bootstrap means in blocks."""

import numpy as np
from routeforge.core.config.training import RouterSelectionSettings
from routeforge.training.predictors.router_family import candidates, fit_candidate, fit_predict


def _data(n=500, d=8, m=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y = (rng.random((n, m)) < 0.5).astype(np.float64)
    y[::7, 1] = np.nan
    return x, y


def test_a_budget_keeps_a_seeded_sample_and_the_prior_of_every_label():
    x, y = _data()
    settings = RouterSelectionSettings(knn_k=[10], knn_prior_strength=[0.0], knn_max_keys=100)
    (knn,) = [c for c in candidates(settings) if c.kind == "knn"]
    weights = fit_candidate(knn, x, y, seed=3)
    assert weights["keys"].shape == (100, 8) and weights["labels"].shape == (100, 3)
    np.testing.assert_allclose(weights["prior"], np.nanmean(y, axis=0), rtol=1e-6)  # all 500 rows, not the sample
    keys = {tuple(np.round(k, 6)) for k in weights["keys"]}
    assert keys <= {tuple(np.round(k, 6)) for k in x}  # a sample of the training prompts
    again = fit_candidate(knn, x, y, seed=3)
    assert np.array_equal(again["keys"], weights["keys"])  # seeded
    assert fit_predict(knn, x, y, x[:20], seed=3).shape == (20, 3)


def test_without_a_budget_every_prompt_is_a_key_and_names_are_unchanged():
    x, y = _data()
    settings = RouterSelectionSettings(knn_k=[10], knn_prior_strength=[0.0])
    (knn,) = [c for c in candidates(settings) if c.kind == "knn"]
    assert knn.name == "knn_k10_prior_strength0"
    assert fit_candidate(knn, x, y)["keys"].shape == (500, 8)
    small = RouterSelectionSettings(knn_k=[10], knn_prior_strength=[0.0], knn_max_keys=1000)
    (bounded,) = [c for c in candidates(small) if c.kind == "knn"]
    assert np.array_equal(fit_candidate(bounded, x, y)["keys"], x)  # under the budget: every prompt


def test_bootstrap_means_in_blocks_keep_small_results_and_bound_large_ones(monkeypatch):
    from routeforge.training.predictors import router_selection
    from routeforge.training.predictors.router_selection import bootstrap_means

    values = np.random.default_rng(1).normal(0.1, 1.0, size=3000)
    one_call = np.random.default_rng(7).choice(values, size=(200, 3000), replace=True).mean(axis=1)
    assert np.array_equal(bootstrap_means(np.random.default_rng(7), values, 200), one_call)  # under the block
    monkeypatch.setattr(router_selection, "BOOTSTRAP_BLOCK", 10_000)  # 3 draws a block
    blocked = bootstrap_means(np.random.default_rng(7), values, 200)
    assert blocked.shape == (200,)
    assert abs(blocked.mean() - values.mean()) < 0.01 and abs(blocked.std() - one_call.std()) < 0.005
