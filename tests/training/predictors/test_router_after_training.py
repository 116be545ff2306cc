"""What a router learns after training: a model added from a few labels of its own, and outcomes
from production (Thompson sampling per cluster and model); both kept by `save` / `load`.

Synthetic data of tests/training/predictors/test_router_selection.py: four clusters; in 0 and 1 the
best model depends on the side of the cluster, in 2 and 3 labels are coin flips at fixed rates.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from routeforge.artifacts.deciding.router import Router
from routeforge.training.predictors.add_model import add_model

from tests.training.predictors.test_router_selection import ENCODER, MODELS, SETTINGS, synthetic


@pytest.fixture(scope="module")
def router_without_large():
    """The router trained on "small" and "medium" only (the fleet before "large" joined)."""
    from routeforge.training.predictors.router_selection import select_router

    x, y = synthetic(900, 11)
    router = select_router(x, y[:, :2], MODELS[:2], SETTINGS, ENCODER, log=lambda _: None).router
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

    from routeforge.core.config.training import OutcomeSettings
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
    router = select_router(x, y, ["small", "medium"], SETTINGS.model_copy(update={"guard_clusters": 2}),
                           ENCODER, log=lambda _: None).router
    # production says "medium" fails at math (thumbs-down; its training mean in the one guard cluster is
    # 0.4, so this is not beyond the contradiction threshold); one client
    # also repeats one thumbs-down line 50 times (counted once)
    lines = [{"timestamp": i, "request": {"prompt": t}, "outcome": {"thumbs_up": False},
              "auth": {"client_id": "team-a"},
              "response": {"model": "medium", "usage": {"prompt_tokens": 5, "completion_tokens": 5}}}
             for i, t in enumerate(np.asarray(texts)[math])]
    spam = {**lines[0], "outcome": {"thumbs_up": False}, "auth": {"client_id": "spammer"}}
    lines += [spam] * 50
    lines.append({**lines[0], "response": {**lines[0]["response"], "model": "retired"}})
    lines.append({**lines[0], "outcome": {"score": 3}})
    (tmp_path / "traffic.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    estimate_before = router.predict_embeddings(x[math]).quality[:, 1].mean()
    quarantine = Quarantine("router_selection")
    online = replay_outcomes(router, [str(tmp_path / "traffic.jsonl")], TrainingEncoder(ENCODER_PACKAGE_REF),
                             quarantine, log=lambda _: None, settings=OutcomeSettings(sources=["team-a", "spammer"]))
    assert online["logged_outcomes"] == int(math.sum()) + 51 and online["other_models"] == 1
    assert online["duplicates"] == 49 and online["sources"] == 2 and online["contradicting"] == []
    assert online["counted"] + online["unseen_task"] == int(math.sum()) + 1 and online["counted"] > 0
    assert len(quarantine) == 1 and "outcome.score" in quarantine.rows[0]["reason"]
    assert router.meta["online"]["updates"] == online["counted"]
    # the router's math estimate for "medium" falls, by no more than the sources' capped weight allows
    after = router.predict_embeddings(x[math]).quality[:, 1].mean()
    assert estimate_before - 0.3 < after < estimate_before - 0.05


class _Lookup:
    """An encoder over precomputed embeddings: text "p<i>" is row i (the synthetic data's prompts)."""

    def __init__(self, x):
        self.x = x

    def encode(self, texts, truncation_side="right"):
        return self.x[[int(t[1:]) for t in texts]]


def test_one_source_flooding_thumbs_down_moves_the_best_models_share_within_the_bound(router_without_large,
                                                                                        tmp_path):
    """Issue 53, item 5: one client sends 10,000 thumbs-down for the model training found best in
    clusters 0–1 ("small" on one side, "medium" on the other). At the runtime (`Router.update` with
    sources) each cell moves at most a third of the way toward the flood (`MAX_SOURCE_WEIGHT` against
    the prior's 20); through the pipeline's replay the flood contradicts training and is not absorbed.
    Without sources (before the cap) the same flood took a fifth of its prompts away from the model."""
    import json

    from routeforge.artifacts.deciding.router import MAX_SOURCE_WEIGHT
    from routeforge.core.storage import Quarantine
    from routeforge.training.predictors.outcomes import replay_outcomes

    xt, _, cluster = synthetic(600, 31, with_clusters=True)
    flood, _, c_flood = synthetic(10_000, 32, with_clusters=True)
    flood = flood[c_flood < 2]
    n = len(flood)
    models, bad = ["small"] * n, np.zeros(n)

    def share(router) -> float:
        return float((router.predict_embeddings(xt).best_index(0.0)[cluster < 2] == 0).mean())

    base = share(router_without_large)
    prior = router_without_large._online_prior()
    unbounded = copy.deepcopy(router_without_large)
    unbounded.update_embeddings(flood, models, bad)  # no sources: every line counts
    capped = copy.deepcopy(router_without_large)
    capped.update_embeddings(flood, models, bad, sources=["one-client"] * n)
    shift = np.abs(capped._online_shift())
    bound = MAX_SOURCE_WEIGHT / (20.0 + MAX_SOURCE_WEIGHT) * prior + 1e-9
    assert (shift <= bound).all()  # every cell within a third of the gap to the flood
    # measured on this data: uncapped 0.536 -> 0.425 of the clusters' prompts; capped, unchanged
    assert share(unbounded) < base - 0.1
    assert abs(share(capped) - base) <= 0.05

    # the pipeline: the same flood as log lines of one client, plus 5,000 verbatim repeats
    lines = [{"timestamp": i, "request": {"prompt": f"p{i}"}, "outcome": {"thumbs_up": False},
              "client": "one-client", "response": {"model": "small",
                                                   "usage": {"prompt_tokens": 5, "completion_tokens": 5}}}
             for i in range(n)]
    lines += [lines[0]] * 5000
    (tmp_path / "flood.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    replayed = copy.deepcopy(router_without_large)
    said = []
    online = replay_outcomes(replayed, [str(tmp_path / "flood.jsonl")], _Lookup(flood), Quarantine("r"),
                             log=said.append)
    assert online["duplicates"] == 5000 and online["sources"] == 1
    flagged = {(c["cluster"], c["model"]) for c in online["contradicting"]}
    assert flagged and all(model == "small" for _, model in flagged)
    assert share(replayed) == base  # flagged cells are not absorbed
    assert any("contradict training" in line and "not absorbed" in line for line in said)


def test_many_sources_together_move_a_cell_no_further_than_the_total_cap(router_without_large, tmp_path):
    """Issue 61, item 7: 600 thumbs-up for the model training found worse in clusters 0-1, each line
    naming a different `user`. Before, each invented user was a source of its own and the flood moved
    a cell from 0.067 to 0.324; now lines without the gateway's authenticated id are one source
    (a third of the gap at most), and 600 authenticated sources together still move a cell at most
    half of the gap (`MAX_CELL_WEIGHT` against the prior's 20)."""
    import json

    from routeforge.artifacts.deciding.router import MAX_CELL_WEIGHT, MAX_SOURCE_WEIGHT
    from routeforge.core.config.training import OutcomeSettings
    from routeforge.core.storage import Quarantine
    from routeforge.training.predictors.outcomes import replay_outcomes

    flood, _, c_flood = synthetic(3000, 33, with_clusters=True)
    flood = flood[c_flood < 2][:600]
    n = len(flood)
    prior = router_without_large._online_prior()
    gap = 1.0 - prior  # thumbs-up: every cell is pulled toward 1

    many = copy.deepcopy(router_without_large)
    many.update_embeddings(flood, ["medium"] * n, np.ones(n), sources=[f"key-{i}" for i in range(n)])
    shift = many._online_shift()
    assert (shift <= MAX_CELL_WEIGHT / (20.0 + MAX_CELL_WEIGHT) * gap + 1e-9).all()
    assert shift[:2, 1].max() > 0.3 * gap[:2, 1].max()  # the cap bounds the shift; it does not erase it

    def replayed(auth: bool, listed: bool = True) -> tuple[np.ndarray, dict]:
        lines = [{"timestamp": i, "request": {"prompt": f"p{i}", "user": f"user-{i}"}, "outcome": {"score": 0.45},
                  **({"auth": {"client_id": f"key-{i}"}} if auth else {}),
                  "response": {"model": "medium", "usage": {"prompt_tokens": 5, "completion_tokens": 5}}}
                 for i in range(n)]
        path = tmp_path / f"many-{auth}.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        router = copy.deepcopy(router_without_large)
        online = replay_outcomes(router, [str(path)], _Lookup(flood), Quarantine("r"), log=lambda _: None,
                                 settings=OutcomeSettings(contradiction_threshold=1.0,
                                                          sources=[f"key-{i}" for i in range(n)] if listed else []))
        return router._online_shift(), online

    shift, online = replayed(auth=False)
    assert online["sources"] == 1 and online["unauthenticated"] == n
    assert (np.abs(shift) <= MAX_SOURCE_WEIGHT / (20.0 + MAX_SOURCE_WEIGHT) * np.abs(0.45 - prior) + 1e-9).all()
    shift, online = replayed(auth=True)
    assert online["sources"] == n and online["unauthenticated"] == 0
    assert (np.abs(shift) <= MAX_CELL_WEIGHT / (20.0 + MAX_CELL_WEIGHT) * np.abs(0.45 - prior) + 1e-9).all()
    # issue 71: ids nobody listed (whoever writes the log writes them) are one source, however many
    shift, online = replayed(auth=True, listed=False)
    assert online["sources"] == 1 and online["unauthenticated"] == n
    assert (np.abs(shift) <= MAX_SOURCE_WEIGHT / (20.0 + MAX_SOURCE_WEIGHT) * np.abs(0.45 - prior) + 1e-9).all()


def test_thompson_choices_carry_the_propensity_a_replay_needs(router_without_large):
    """`choose_embeddings` says how likely each Thompson choice was: the estimate agrees with how
    often independent choices pick each model; a deterministic router logs 1, and ε-exploration
    gives every model at least ε/m."""
    router = copy.deepcopy(router_without_large)
    x, y = synthetic(400, 21)
    router.update_embeddings(x[:20], ["small"] * 10 + ["medium"] * 10, y[:20, 0].tolist()[:10] + y[10:20, 1].tolist())
    xt = x[100:160]
    choice = router.choose_embeddings(xt, rng=np.random.default_rng(0))
    assert np.allclose(choice.probabilities.sum(axis=1), 1.0) and (choice.propensity > 0).all()
    assert np.allclose(choice.propensity, choice.probabilities[np.arange(60), [MODELS.index(m) for m in choice.models]])
    uncertain = (choice.probabilities.max(axis=1) < 0.95).mean()
    assert uncertain > 0.1  # outcomes left some prompts undecided: Thompson sampling varies there
    frequency = np.zeros((60, 2))
    for seed in range(400):
        picks = router.choose_embeddings(xt, rng=np.random.default_rng(seed + 1), draws=0).models
        frequency[np.arange(60), [MODELS.index(m) for m in picks]] += 1 / 400
    assert np.abs(frequency - choice.probabilities).mean() < 0.04
    assert np.abs(frequency - choice.probabilities).max() < 0.25
    fixed = copy.deepcopy(router_without_large).choose_embeddings(xt)
    assert (fixed.propensity == 1.0).all()  # no outcomes learned, no rng: one choice per prompt
    explored = router.choose_embeddings(xt, rng=np.random.default_rng(3), explore=0.2)
    assert explored.probabilities.min() >= 0.1 - 1e-12  # ε/m with two models
    with pytest.raises(ValueError, match="explore needs rng"):
        router.choose_embeddings(xt, explore=0.2)
