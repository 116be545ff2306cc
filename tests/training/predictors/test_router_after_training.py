"""What a router learns after training: a model added from a few labels of its own, and outcomes
from production (Thompson sampling per cluster and model); both kept by `save` / `load`.

Synthetic data of tests/training/predictors/test_router_selection.py: four clusters; in 0 and 1 the
best model depends on the side of the cluster, in 2 and 3 labels are coin flips at fixed rates.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from routeforge.artifacts.router import Router
from routeforge.training.predictors.add_model import add_model

from tests.training.predictors.test_router_selection import ENCODER, MODELS, SETTINGS, synthetic


@pytest.fixture(scope="module")
def router_without_large():
    """The router trained on "small" and "medium" only (the fleet before "large" joined)."""
    from routeforge.training.predictors.router_selection import select_router

    x, y = synthetic(900, 11)
    router, _ = select_router(x, y[:, :2], MODELS[:2], SETTINGS, ENCODER, log=lambda _: None)
    return router


def _large_is_best_in_cluster_3(n: int, seed: int):
    """A new model that is the best by far in cluster 3 and mediocre elsewhere."""
    x, y, cluster = synthetic(n, seed, with_clusters=True)
    rng = np.random.default_rng(seed)
    large = np.where(cluster == 3, (rng.random(n) < 0.95).astype(float), (rng.random(n) < 0.3).astype(float))
    return x, y, cluster, large


def test_a_model_added_from_its_labels_is_routed_where_it_is_best(router_without_large, tmp_path):
    router = copy.deepcopy(router_without_large)
    x, _, _, large = _large_is_best_in_cluster_3(400, 12)
    record = add_model(router, "large", x, large, output_tokens=80.0, cost=0.002)
    assert router.models == ["small", "medium", "large"] and record["labels"] == 400
    assert router.meta["added_models"][0]["name"] == "large" and record["ridge"] > 0
    xt, yt, cluster, large_t = _large_is_best_in_cluster_3(600, 13)
    pred = router.predict_embeddings(xt)
    assert pred.quality.shape == (600, 3) and ((pred.quality >= 0) & (pred.quality <= 1)).all()
    picks = pred.best_index(0.0)
    assert (picks[cluster == 3] == 2).mean() > 0.8  # routed to the new model where it is best
    assert (picks[cluster < 2] == 2).mean() < 0.2  # and not where the trained models are better
    truth = np.column_stack([yt[:, :2], large_t])
    routed = truth[np.arange(600), picks].mean()
    before = yt[np.arange(600), router_without_large.predict_embeddings(xt).best_index(0.0)].mean()
    assert routed > before + 0.05
    # the trained models route among themselves exactly as before
    old = router_without_large.predict_embeddings(xt).quality
    assert np.allclose(pred.quality[:, :2], old)
    assert pred.output_tokens[0, 2] == 80.0 and pred.cost[0, 2] == 0.002
    router.save(tmp_path / "router")
    again = Router.load(tmp_path / "router")
    assert np.allclose(again.predict_embeddings(xt).quality, pred.quality)


def test_few_labels_stay_near_the_average_trained_model(router_without_large):
    router = copy.deepcopy(router_without_large)
    x, _, _, large = _large_is_best_in_cluster_3(12, 14)
    record = add_model(router, "large", x, large)
    assert record["ridge"] == 100.0  # too few labels to cross-validate: the strongest pull to the prior
    coef = router.weights["added/large/coef"]
    assert np.allclose(coef, 0.5, atol=0.25)


def test_add_model_names_what_is_wrong(router_without_large):
    router = copy.deepcopy(router_without_large)
    x, _ = synthetic(5, 3)
    with pytest.raises(ValueError, match="'small' is already one of the router's models"):
        add_model(router, "small", x, np.ones(5))
    with pytest.raises(ValueError, match="labels must lie in \\[0, 1\\]"):
        add_model(router, "large", x, np.full(5, 3.0))
    with pytest.raises(ValueError, match="at least 2 labelled prompts"):
        add_model(router, "large", x[:1], np.ones(1))


def test_outcomes_move_the_cluster_where_production_disagrees_with_training(router_without_large, tmp_path):
    """"medium" turns out far better in cluster 2 than training said: after the outcomes, the router
    sends cluster 2 there; other clusters keep their routing; the state survives save/load."""
    router = copy.deepcopy(router_without_large)
    xt, _, cluster = synthetic(400, 21, with_clusters=True)
    before = router.predict_embeddings(xt).best_index(0.0)
    stream, _, c_stream = synthetic(600, 22, with_clusters=True)
    in_2 = c_stream == 2
    models = ["medium" if i % 2 else "small" for i in range(len(stream))]
    outcomes = np.where(in_2, np.where(np.array(models) == "medium", 1.0, 0.0), np.nan)
    counted = router.update_embeddings(stream, models, outcomes)
    assert counted == int(in_2.sum()) and router.meta["online"]["updates"] == counted
    after = router.predict_embeddings(xt).best_index(0.0)
    assert (after[cluster == 2] == 1).all()
    assert (after[cluster != 2] == before[cluster != 2]).mean() > 0.95
    # Thompson sampling: draws from the posterior, the same for the same generator state
    draws = [router.predict_embeddings(xt, rng=np.random.default_rng(5)).quality for _ in range(2)]
    assert np.allclose(draws[0], draws[1]) and not np.allclose(draws[0], router.predict_embeddings(xt).quality)
    router.save(tmp_path / "router")
    assert np.array_equal(Router.load(tmp_path / "router").predict_embeddings(xt).best_index(0.0), after)
    with pytest.raises(ValueError, match="models \\['huge'\\] are not the router's"):
        router.update_embeddings(stream[:1], ["huge"], [1.0])
    with pytest.raises(ValueError, match="outcomes must lie in \\[0, 1\\]"):
        router.update_embeddings(stream[:1], ["small"], [2.0])


def test_the_pipeline_replays_logged_outcomes_into_the_new_router(tmp_path):
    """The fleet's traffic logs with outcomes go into a freshly trained router (real MiniLM
    embeddings): counted per model it knows, skipped for others, a bad outcome line quarantined."""
    import json

    from routeforge.core.pretrained import ENCODER_PACKAGE_REF
    from routeforge.core.storage import Quarantine
    from routeforge.training.embeddings import TrainingEncoder, encode
    from routeforge.training.predictors.outcomes import replay_outcomes
    from routeforge.training.predictors.router_selection import select_router

    from tests.conftest import CONFIGS

    rows = [json.loads(line) for line in (CONFIGS / "data" / "demo_prompts.jsonl").read_text().splitlines()]
    texts = [r["prompt"] for r in rows]
    math = np.array([r["task"] == "math" for r in rows])
    y = np.column_stack([np.where(math, 0.2, 0.8), np.where(math, 0.9, 0.3)])  # "medium" is the math model
    x = encode(texts, ENCODER_PACKAGE_REF)
    router, _ = select_router(x, y, ["small", "medium"], SETTINGS.model_copy(update={"guard_clusters": 2}),
                              ENCODER, log=lambda _: None)
    lines = [{"timestamp": i, "request": {"prompt": t}, "outcome": {"thumbs_up": False},
              "response": {"model": "medium", "usage": {"prompt_tokens": 5, "completion_tokens": 5}}}
             for i, t in enumerate(np.asarray(texts)[math])]
    lines.append({**lines[0], "response": {**lines[0]["response"], "model": "retired"}})
    lines.append({**lines[0], "outcome": {"score": 3}})
    (tmp_path / "traffic.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    estimate_before = router.predict_embeddings(x[math]).quality[:, 1].mean()
    quarantine = Quarantine("router_selection")
    online = replay_outcomes(router, [str(tmp_path / "traffic.jsonl")], TrainingEncoder(ENCODER_PACKAGE_REF),
                             quarantine, log=lambda _: None)
    assert online["logged_outcomes"] == int(math.sum()) + 1 and online["other_models"] == 1
    assert online["counted"] + online["unseen_task"] == int(math.sum()) and online["counted"] > 0
    assert len(quarantine) == 1 and "outcome.score" in quarantine.rows[0]["reason"]
    assert router.meta["online"]["updates"] == online["counted"]
    # production says "medium" fails at math: the router's math estimate for it falls
    assert router.predict_embeddings(x[math]).quality[:, 1].mean() < estimate_before - 0.05
