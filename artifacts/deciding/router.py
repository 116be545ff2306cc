"""The bundle's router: per-model quality estimates for prompts, and the model to send each prompt to.

One component folder holds `router.json` (the chosen estimator, its members and the guard) and
`weights.safetensors` (every array, keyed `<member>/<name>`). Prediction needs NumPy, safetensors
and the bundle's ONNX sentence encoder only. Member kinds:

- `knn`: cosine k nearest neighbours over the training prompts' embeddings, votes weighted
  1 / (1 − cos + 1e-6), shrunk toward the per-model prior with strength `a`; prompts tied with the
  k-th neighbour share its places equally (`artifacts.deciding.knn.neighbour_weights`, the bundle KNN's own rule);
- `mlp`: per-model heads on the frozen embedding, sigmoid outputs (no hidden layer: logistic);
- `mf`: RouteLLM-style matrix factorisation, σ(⟨v_m, P·x⟩ + b_m) with learned model embeddings v_m;
- `dc`: RouterDC's dual-contrastive head: the cosine of a projected prompt with learned model
  embeddings, mapped to quality per model by σ(a_m·cos + b_m);
- `task_mixture`: the training tasks' (or k-means clusters') mean quality, weighted by a softmax
  task classifier's posterior: softmax(x·w + b) · group_quality;
- an ensemble is the mean of its members' predictions;
- where cross-validation kept it, a per-model isotonic map (knots `calibration/x`, `calibration/y`,
  split by `calibration/offsets`) turns the estimate into a calibrated probability.

The guard: prompts are assigned to the nearest cluster centroid (tasks, or k-means clusters where
the training data names no task); a cluster where cross-validation showed no reliable gain over its
best single model is routed by the cluster's per-model training means instead of the estimate: at
λ = 0 that is the cluster's best single model, and cost still trades off as it does elsewhere.
A prompt farther from every centroid than almost all training prompts (cosine below
`guard/ood_threshold`) belongs to no task the router has seen. It is routed by the rule selection
chose by leaving each training cluster out (`meta.guard.unseen_rule`): the training clusters' means
averaged with each cluster counted once (`guard/unseen_quality`: the best single model across tasks,
safest where neighbouring tasks want different models, and not swayed by the largest task's
specialist), or its nearest cluster's means (where a new task's neighbour predicts its best model
better).

Added models (`meta.added_models`, `training.predictors.add_model`): a model that joined the fleet
after training, known from a few labelled prompts of its own, is one more column after the trained
ones: σ(Σ_j w_j·logit(q̂_j) + b) over the trained models' estimates (`added/<name>/coef`, `/bias`),
plus a per-cluster offset (`added/<name>/cluster_offset`); the guard's per-cluster means, the
unseen-task row, the priors and the recall table gain its column.

Outcomes (`Router.update`, `meta.online`): Beta posteriors per (guard cluster, model), started at the
cluster's training means, move the estimates by what production reports between retrains
(`online/alpha`, `online/beta`); `choose(texts, rng=...)` routes by Thompson sampling. Given the
source of each outcome (a client or key), a repeated line counts once and one source adds at most
`MAX_SOURCE_WEIGHT` outcomes to a (cluster, model) cell per update, so ten thousand thumbs-down from
one client move an estimate no further than ten do; all sources together add at most
`MAX_CELL_WEIGHT` to a cell per update, so a thousand sources cannot do what one may not.

Known prompts: a prompt whose text (NFC, whitespace collapsed) is one of the training prompts is routed
by the scores observed for it (`recall/keys`: SHA-256 of the text, `recall/quality`), not by an
estimate: production traffic repeats prompts, and for those the router knows rather than guesses.
A model the training row has no score for keeps its estimate. `Router.predict(texts)` applies it;
`predict_embeddings` cannot (it never sees the text) and `apply_recall` adds it to its result.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from routeforge.artifacts.common.extensions import Registry
from routeforge.artifacts.deciding.components import register_component
from routeforge.artifacts.deciding.knn import TIE_EPS, WEIGHT_EPS, neighbour_weights
from routeforge.artifacts.deciding.sentence_encoder import embed_for

# outcomes one client or key may add to one (cluster, model) cell per update: with the prior's 20
# pseudo-observations, one source moves a cell's estimate by at most 10 / 30 of the gap between
# its training mean and what it reports (a third), however many lines it sends
MAX_SOURCE_WEIGHT = 10.0
# outcomes all sources together may add to one cell per update: at most half of the gap (20 / 40),
# however many sources there are (sources are cheap to invent where they are not authenticated)
MAX_CELL_WEIGHT = 20.0


def distinct_outcomes(sources: list[str], texts: list[str], models: list[str], outcomes) -> list[int]:
    """Indices of the first of each (source, prompt, model, outcome): a line one source repeats
    verbatim counts once (`Router.update` and the pipeline's replay both use this)."""
    seen, keep = set(), []
    for i, key in enumerate(zip(sources, map(text_key, texts), models, map(float, outcomes))):
        if key not in seen:
            seen.add(key)
            keep.append(i)
    return keep


def source_weights(sources: list[str], cluster: np.ndarray, models: list[str], use: np.ndarray,
                   cap: float, cell_cap: float = MAX_CELL_WEIGHT) -> np.ndarray:
    """A weight per outcome such that each source's outcomes in one (cluster, model) cell add up to
    at most `cap` (n outcomes of a source in a cell weigh min(1, cap / n) each), and all sources'
    outcomes in the cell to at most `cell_cap` (scaled down together where they add up to more)."""
    from collections import defaultdict

    per_source: dict[tuple, int] = defaultdict(int)
    for key, take in zip(zip(sources, cluster.tolist(), models), use):
        per_source[key] += bool(take)
    weight = np.array([min(1.0, cap / per_source[key]) if per_source[key] else 1.0
                       for key in zip(sources, cluster.tolist(), models)])
    total: dict[tuple, float] = defaultdict(float)
    cells = list(zip(cluster.tolist(), models))
    for cell, w, take in zip(cells, weight, use):
        total[cell] += w if take else 0.0
    return np.array([w * min(1.0, cell_cap / total[cell]) if total[cell] else w
                     for cell, w in zip(cells, weight)])


@dataclass
class RouterPrediction:
    models: list[str]
    quality: np.ndarray  # (n_prompts, n_models)
    output_tokens: np.ndarray  # NaN where the training data had no lengths
    cost: np.ndarray  # NaN where the training data had no costs
    cluster: np.ndarray  # (n_prompts,) the guard's cluster of each prompt
    guarded: np.ndarray  # (n_prompts,) True where the cluster's training means replace the estimate
    unseen: np.ndarray  # (n_prompts,) True where the prompt is far from every training cluster
    recalled: np.ndarray | None = None  # (n_prompts,) True where observed scores of a training prompt were used

    def best_index(self, lam: float | np.ndarray = 0.0) -> np.ndarray:
        """argmax of predicted quality − λ · predicted cost (unknown cost counts as 0; ties go to
        the lower cost). `lam`: one λ, or one per prompt."""
        cost = np.nan_to_num(np.asarray(self.cost, dtype=np.float64), nan=0.0)
        lam = np.asarray(lam, dtype=np.float64)
        lam = lam[:, None] if lam.ndim == 1 else lam
        utility = np.round(np.asarray(self.quality, dtype=np.float64) - lam * cost, 9)
        utility = np.where(np.isnan(utility), -np.inf, utility)  # an unknown estimate never wins a known one
        if utility.size == 0:
            return np.zeros(len(utility), dtype=np.int64)
        best = utility == utility.max(axis=1, keepdims=True)
        cheapest = np.where(best, cost, np.inf)
        best &= cheapest == cheapest.min(axis=1, keepdims=True)
        return np.argmax(best, axis=1).astype(np.int64)  # the first of the cheapest best

    def best_model(self, lam: float = 0.0) -> list[str]:
        return [self.models[i] for i in self.best_index(lam)]


PROPENSITY_DRAWS = 256  # posterior draws that estimate a Thompson choice's propensity


@dataclass(frozen=True)
class Choice:
    """What a serving rule chose, and how likely it was to choose it: the propensity a traffic log
    keeps (`"routing": {"propensity": ...}`; `RouterBundle.route` gives it as `Routing.log_fields`)
    so that another router can later be judged on that traffic (`artifacts.operating.replay`).
    `probabilities` (prompts × models) is the rule's whole distribution: one-hot for a deterministic
    router, a Monte-Carlo estimate for Thompson sampling (the served draw and `PROPENSITY_DRAWS`
    more), mixed with uniform for ε-exploration."""

    models: list[str]
    propensity: np.ndarray  # (n,) probability of the model served
    probabilities: np.ndarray  # (n, m) over the router's models


def explore_mix(served: np.ndarray, probabilities: np.ndarray, explore: float,
                rng: np.random.Generator | None) -> tuple[np.ndarray, np.ndarray]:
    """ε-exploration: each prompt goes to a uniformly random model with probability `explore`,
    else as chosen; the probabilities become (1 − ε)·p + ε/m. Without exploration a deterministic
    router's log supports no counterfactual: a challenger is judged only where it agrees."""
    if not 0.0 <= explore < 1.0:
        raise ValueError(f"explore: {explore!r} is not in [0, 1)")
    if explore == 0.0:
        return served, probabilities
    if rng is None:
        raise ValueError("explore needs rng (a numpy Generator): the random choices are the caller's to seed")
    n, m = probabilities.shape
    explored = rng.random(n) < explore
    served = np.where(explored, rng.integers(0, m, size=n), served)
    return served, (1.0 - explore) * probabilities + explore / m


def one_hot(index: np.ndarray, m: int) -> np.ndarray:
    out = np.zeros((len(index), m))
    out[np.arange(len(index)), index] = 1.0
    return out


def text_key(text: str) -> bytes:
    """The identity of a prompt for recall: SHA-256 of its text, Unicode NFC, whitespace runs collapsed."""
    return hashlib.sha256(" ".join(unicodedata.normalize("NFC", str(text)).split()).encode("utf-8")).digest()


def recall_weights(texts: list[str], quality: np.ndarray) -> dict[str, np.ndarray]:
    """`recall/keys` (n, 32) uint8 and `recall/quality` (n, m): the training prompts' observed scores
    (a text seen twice keeps the mean of its rows)."""
    rows: dict[bytes, list[int]] = {}
    for i, text in enumerate(texts):
        rows.setdefault(text_key(text), []).append(i)
    keys = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(len(rows), 32)
    with warnings.catch_warnings():  # a model with no label for a text: NaN, which is what is meant
        warnings.simplefilter("ignore", RuntimeWarning)
        observed = np.stack([np.nanmean(quality[idx], axis=0) for idx in rows.values()]).astype(np.float32)
    return {"recall/keys": keys.copy(), "recall/quality": observed}


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def logit(q: np.ndarray, eps: float = 0.02) -> np.ndarray:
    """log(q / (1 − q)), q clipped to [eps, 1 − eps] (an estimate of 0 or 1 is not infinitely sure)."""
    q = np.clip(q, eps, 1 - eps)
    return np.log(q / (1 - q))


def _gelu(z: np.ndarray) -> np.ndarray:
    """GELU, tanh form (the trainer uses `nn.GELU(approximate="tanh")`, so both agree)."""
    return 0.5 * z * (1.0 + np.tanh(0.7978845608028654 * (z + 0.044715 * z**3)))


MemberRule = Callable[[dict[str, Any], dict[str, np.ndarray], np.ndarray], np.ndarray]
# member kind → its prediction rule: (params, weights, embeddings) → (n, m) quality. Its fitter, of the
# same name, is in `training.predictors.router_family.MEMBER_FITTERS` (the training layer; a test holds
# the two registries to the same names)
MEMBER_KINDS: Registry[MemberRule] = Registry("router member kind", ("routeforge.artifacts.deciding.router",))
router_member = MEMBER_KINDS.register


# the KNN member compares every query with every key: queries go in blocks of at most this many
# (query, key) pairs, so memory stays ~0.1 GB however many are asked at once (cross-validation
# over 10^5 prompts asked for 26,700 × 53,300 at once, and the kernel stopped the process at 24 GB);
# ~170 queries a block against 10^5 keys is where the matrix product ran fastest here
KNN_BLOCK_PAIRS = 1 << 24


@router_member("knn")
def _knn(params: dict[str, Any], w: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    keys, labels, prior = w["keys"], w["labels"], w["prior"]
    k = min(int(params["k"]), len(keys))
    a = float(params["prior_strength"])
    out = np.empty((len(x), labels.shape[1]), dtype=np.float64)
    block = max(1, KNN_BLOCK_PAIRS // max(len(keys), 1))
    for start in range(0, len(x), block):  # row by row the same rule: blocks change nothing but memory
        sims = x[start:start + block] @ keys.T
        if np.isfinite(sims.sum()):  # one fast pass: a NaN or ±inf anywhere makes the sum non-finite
            votes = _neighbour_votes(sims, k, labels)
        else:  # the dense rule, which knows what −inf and NaN mean, a quarter of the block at a time
            votes = np.concatenate([_dense_votes(part, k, labels) for part in np.array_split(sims, 4)])
        out[start:start + block] = (k * votes + a * prior) / (k + a)
    return out


def _dense_votes(sims: np.ndarray, k: int, labels: np.ndarray) -> np.ndarray:
    _, weights = neighbour_weights(sims.astype(np.float64), k)
    return (weights @ labels) / weights.sum(axis=1, keepdims=True)


def _neighbour_votes(sims: np.ndarray, k: int, labels: np.ndarray) -> np.ndarray:
    """`neighbour_weights`' normalized vote of each query's neighbours, `labels` averaged, from
    finite float32 cosines without a dense float64 copy or a full-width partition: only the k
    nearest and those tied with the k-th (within `TIE_EPS`) carry weight. Each row's columns are cut
    into k groups; the smallest group maximum is a lower bound of the k-th largest cosine (k groups
    each hold one at least that large), so the cosines from that bound on (a few hundred of 10^5)
    are gathered and the k-th found among them; thresholds are compared in float64 as the dense rule
    compares them. Cross-validation over 10^6 prompts spent most of its time in the dense rule."""
    n, width = sims.shape
    bound = np.maximum.reduceat(sims, np.arange(k) * (width // k), axis=1).min(axis=1).astype(np.float64)
    # float32 thresholds a step below the float64 ones: a superset, cut exactly in float64 below
    floor = np.nextafter((bound - TIE_EPS).astype(np.float32), np.float32(-np.inf))
    rows, cols = np.divmod(np.flatnonzero(sims >= floor[:, None]), width)  # row-major: each row's run in order
    near = sims[rows, cols].astype(np.float64)
    counts = np.bincount(rows, minlength=n)
    starts = np.cumsum(counts) - counts
    padded = np.full((n, counts.max()), -np.inf)
    padded[rows, np.arange(len(rows)) - starts[rows]] = near
    kth = -np.partition(-padded, k - 1, axis=1)[:, k - 1]
    keep = near >= kth[rows] - TIE_EPS
    rows, cols, near = rows[keep], cols[keep], near[keep]
    above = near > kth[rows] + TIE_EPS
    n_above = np.bincount(rows, weights=above, minlength=n)
    n_tied = np.bincount(rows, weights=~above, minlength=n)
    share = np.where(above, 1.0, ((k - n_above) / np.maximum(n_tied, 1))[rows])
    weight = share / (1.0 - np.clip(near, -1.0, 1.0) + WEIGHT_EPS)
    total = np.bincount(rows, weights=weight, minlength=n)
    votes = np.stack([np.bincount(rows, weights=weight * labels[cols, j], minlength=n)
                      for j in range(labels.shape[1])], axis=1)
    return votes / total[:, None]


@router_member("mlp")
def _mlp(params: dict[str, Any], w: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    h = x
    for i in range(int(params["layers"]) - 1):
        h = _gelu(h @ w[f"w{i}"] + w[f"b{i}"])
    last = int(params["layers"]) - 1
    return _sigmoid(h @ w[f"w{last}"] + w[f"b{last}"])


@router_member("mf")
def _mf(params: dict[str, Any], w: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    return _sigmoid((x @ w["proj"]) @ w["model_emb"].T + w["model_bias"])


@router_member("task_mixture")
def _task_mixture(params: dict[str, Any], w: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """Σ_t softmax(x·w + b)_t · group_quality_t"""
    z = x @ w["w"] + w["b"]
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return (z / z.sum(axis=1, keepdims=True)) @ w["group_quality"]


@router_member("dc")
def _dc(params: dict[str, Any], w: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    z = _gelu(x @ w["w0"] + w["b0"]) @ w["w1"] + w["b1"]
    z = z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)
    return _sigmoid((z @ w["model_emb"].T) * w["scale"] + w["bias"])


def predict_member(kind: str, params: dict[str, Any], w: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """One member's (n, m) quality estimate from L2-normalized embeddings `x`."""
    if kind not in MEMBER_KINDS:
        raise ValueError(MEMBER_KINDS.unknown(kind))
    return MEMBER_KINDS.get(kind)(params, w, x)


@register_component("router")
class Router:
    """The chosen estimator of a bundle (`bundle.router()`)."""

    def __init__(self, meta: dict[str, Any], weights: dict[str, np.ndarray]):
        self.meta = meta
        self.models: list[str] = meta["models"]
        self.weights = weights
        self._recall_index = self._index_recall()
        self.encoder = None  # the bundle's SentenceEncoder, attached by RouterBundle

    def _index_recall(self) -> dict[bytes, int]:
        keys = self.weights.get("recall/keys")
        return {} if keys is None else {bytes(k): i for i, k in enumerate(keys)}

    def add_recall(self, texts: list[str], quality: np.ndarray) -> None:
        """Remember the training prompts' observed scores (`recall_weights`) for `apply_recall`."""
        self.weights.update(recall_weights(texts, quality))
        self._recall_index = self._index_recall()
        self.meta["recall"] = {"prompts": len(self._recall_index),
                               "key": "sha256 of the text, NFC, whitespace collapsed"}

    def _member_weights(self, name: str) -> dict[str, np.ndarray]:
        prefix = f"{name}/"
        return {k[len(prefix):]: v for k, v in self.weights.items() if k.startswith(prefix)}

    @property
    def added_models(self) -> list[dict[str, Any]]:
        """Models added after training from a few labels of their own (`training.predictors.add_model`)."""
        return self.meta.get("added_models", [])

    def base_estimate(self, x: np.ndarray) -> np.ndarray:
        """The trained estimator's quality for the models it was trained on (members, then the
        calibration maps): no added model, no guard."""
        x = np.asarray(x, dtype=np.float32)
        members = self.meta["members"]
        quality = np.mean([predict_member(m["kind"], m["params"], self._member_weights(m["name"]), x)
                           for m in members], axis=0)
        if "calibration/offsets" in self.weights:  # per-model isotonic maps, chosen by cross-validation
            xs, ys, cut = (self.weights["calibration/x"], self.weights["calibration/y"],
                           self.weights["calibration/offsets"])
            quality = np.column_stack([np.interp(quality[:, j], xs[cut[j]:cut[j + 1]], ys[cut[j]:cut[j + 1]])
                                       for j in range(quality.shape[1])])
        return quality

    def added_estimate(self, base: np.ndarray, cluster: np.ndarray) -> np.ndarray:
        """Each added model's quality from the base models' estimates: σ(Σ_j w_j·logit(q̂_j) + b),
        an item-response-style read of the prompt's difficulty profile fitted on the model's own
        labels and shrunk toward the average trained model, plus its cluster's offset."""
        columns = []
        for added in self.added_models:
            w = self._member_weights(f"added/{added['name']}")
            logits = logit(base)
            columns.append(np.clip(_sigmoid(logits @ w["coef"] + w["bias"][0]) + w["cluster_offset"][cluster], 0, 1))
        return np.column_stack(columns) if columns else np.zeros((len(base), 0))

    def predict_embeddings(self, x: np.ndarray, rng: np.random.Generator | None = None) -> RouterPrediction:
        """Estimates for embedded prompts; `rng`: draw the outcome-learned shifts (Thompson
        sampling) instead of taking their posterior means."""
        prediction = self._trained_estimates(x)
        if "online/alpha" in self.weights:  # outcomes seen since training move each cluster's estimates
            prediction.quality = self._shifted(prediction, self._online_shift(rng))
        return prediction

    @staticmethod
    def _shifted(prediction: RouterPrediction, shift: np.ndarray) -> np.ndarray:
        """The estimates moved by an online shift (clusters × models), except for unseen prompts."""
        return np.where(prediction.unseen[:, None], prediction.quality,
                        np.clip(prediction.quality + shift[prediction.cluster], 0.0, 1.0))

    def _trained_estimates(self, x: np.ndarray) -> RouterPrediction:
        """The estimates as training left them: no outcome-learned shift, no recall."""
        x = np.asarray(x, dtype=np.float32)
        quality = self.base_estimate(x)
        n = len(x)
        centroids = self.weights["guard/centroids"]
        sims = x @ centroids.T
        cluster = np.argmax(sims, axis=1)
        if self.added_models:
            quality = np.hstack([quality, self.added_estimate(quality, cluster)])
        guarded = self.weights["guard/guarded"].astype(bool)[cluster]
        quality = np.where(guarded[:, None], self.weights["guard/cluster_quality"][cluster], quality)
        unseen = sims.max(axis=1) < float(self.weights["guard/ood_threshold"][0])
        # an unseen task: the best model overall, or that of the nearest cluster, as selection chose
        # (bundles written before `guard/unseen_quality` existed fall back on the row-weighted prior)
        fallback = (self.weights["guard/cluster_quality"][cluster]
                    if self.meta.get("guard", {}).get("unseen_rule") == "nearest_cluster"
                    else self.weights.get("guard/unseen_quality", self.weights["prior/quality"])[None, :])
        quality = np.where(unseen[:, None], fallback, quality)
        tokens = np.broadcast_to(self.weights["prior/output_tokens"], (n, len(self.models))).copy()
        cost = np.broadcast_to(self.weights["prior/cost"], (n, len(self.models))).copy()
        return RouterPrediction(self.models, quality, tokens, cost, cluster, guarded, unseen)

    # Learning from outcomes between retrains: Thompson sampling over Beta posteriors per (guard
    # cluster, model). The prior of a cell is the router's own training mean there
    # (`guard/cluster_quality`) with `prior_strength` pseudo-observations; each outcome in [0, 1]
    # (a score, a thumbs-up as 1, an error as 0) adds to α (outcome) and β (1 − outcome). Estimates
    # move by the cell's posterior mean minus its prior mean (or by a posterior draw minus it, when
    # sampling), so a cluster where a model does better in production than in training is routed
    # to it more, while the per-prompt differences the estimator learned are kept.

    def _online_state(self, prior_strength: float) -> tuple[np.ndarray, np.ndarray]:
        if "online/alpha" not in self.weights:
            mean = self._online_prior()
            self.weights["online/alpha"] = prior_strength * mean
            self.weights["online/beta"] = prior_strength * (1.0 - mean)
            self.meta["online"] = {"rule": "thompson_beta_per_cluster", "prior_strength": prior_strength,
                                   "updates": 0}
        return self.weights["online/alpha"], self.weights["online/beta"]

    def _online_shift(self, rng: np.random.Generator | None = None) -> np.ndarray:
        """(clusters, models): posterior mean (or a draw, with `rng`) minus the prior mean."""
        alpha, beta, prior = self._grown_online_state()
        now = rng.beta(alpha, beta) if rng is not None else alpha / (alpha + beta)
        return now - prior

    def _grown_online_state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """α, β and the prior means, α and β first given a column, at the prior, for every model
        added after the first outcome."""
        alpha, beta = self.weights["online/alpha"], self.weights["online/beta"]
        prior = self._online_prior()
        if alpha.shape != prior.shape:
            strength, grow = float(self.meta["online"]["prior_strength"]), prior.shape[1] - alpha.shape[1]
            alpha = self.weights["online/alpha"] = np.hstack([alpha, strength * prior[:, -grow:]])
            beta = self.weights["online/beta"] = np.hstack([beta, strength * (1 - prior[:, -grow:])])
        return alpha, beta, prior

    def _online_prior(self) -> np.ndarray:
        """(clusters, models): the training means the posteriors start from, kept off 0 and 1."""
        return np.clip(self.weights["guard/cluster_quality"].astype(np.float64), 0.01, 0.99)

    def update(self, texts: list[str], models: list[str], outcomes, encoder=None,
               prior_strength: float = 20.0, sources: list[str] | None = None,
               max_source_weight: float = MAX_SOURCE_WEIGHT, max_cell_weight: float = MAX_CELL_WEIGHT) -> int:
        """Learn from production outcomes: prompt `texts[i]` was served by `models[i]` with outcome
        `outcomes[i]` in [0, 1] (NaN: unknown, skipped). Prompts far from every training cluster
        teach nothing (their cluster is a guess). With `sources` (the client or key that reported
        each outcome), a line repeated by one source counts once and each source weighs at most
        `max_source_weight` outcomes per (cluster, model) in this call, all sources together at most
        `max_cell_weight` (`source_weights`). Returns
        how many outcomes were counted; `save` keeps the state, so the next bundle can start from it."""
        if sources is not None:
            keep = distinct_outcomes(sources, texts, models, outcomes)
            texts, models = [texts[i] for i in keep], [models[i] for i in keep]
            outcomes, sources = np.asarray(outcomes, dtype=float)[keep], [sources[i] for i in keep]
        return self.update_embeddings(embed_for(self, texts, encoder), models, outcomes, prior_strength,
                                      sources=sources, max_source_weight=max_source_weight,
                                      max_cell_weight=max_cell_weight)

    def online_cells(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each embedded prompt's guard cluster, and whether it is near enough to one to learn from."""
        sims = np.asarray(x, dtype=np.float32) @ self.weights["guard/centroids"].T
        return np.argmax(sims, axis=1), sims.max(axis=1) >= float(self.weights["guard/ood_threshold"][0])

    def update_embeddings(self, x: np.ndarray, models: list[str], outcomes, prior_strength: float = 20.0,
                          sources: list[str] | None = None, max_source_weight: float = MAX_SOURCE_WEIGHT,
                          max_cell_weight: float = MAX_CELL_WEIGHT,
                          use: np.ndarray | None = None) -> int:
        """`update` on embedded prompts; `use` (bool per outcome) leaves out the others, still
        checked (the pipeline's replay uses it for outcomes it flagged as contradicting training)."""
        x = np.asarray(x, dtype=np.float32)
        outcomes = np.asarray(outcomes, dtype=np.float64)
        if not (len(x) == len(models) == len(outcomes)):
            raise ValueError(f"update: {len(x)} prompts, {len(models)} models and {len(outcomes)} outcomes")
        unknown = sorted(set(models) - set(self.models))
        if unknown:
            raise ValueError(f"update: models {unknown} are not the router's ({self.models})")
        known = np.isfinite(outcomes)
        if ((outcomes[known] < 0) | (outcomes[known] > 1)).any():
            raise ValueError("update: outcomes must lie in [0, 1] (a thumbs-up is 1, an error 0)")
        self._online_state(prior_strength)
        alpha, beta, _ = self._grown_online_state()
        cluster, seen = self.online_cells(x)
        ok = known & seen & (np.ones(len(x), dtype=bool) if use is None else np.asarray(use, dtype=bool))
        weight = (np.ones(len(x)) if sources is None
                  else source_weights(sources, cluster, models, ok, max_source_weight, max_cell_weight))
        counted = 0
        for c, model, outcome, w, take in zip(cluster, models, outcomes, weight, ok):
            if take:
                j = self.models.index(model)
                alpha[c, j] += w * outcome
                beta[c, j] += w * (1.0 - outcome)
                counted += 1
        self.meta["online"]["updates"] += counted
        return counted

    def choose(self, texts: list[str], lam: float = 0.0, rng: np.random.Generator | None = None,
               encoder=None, *, with_propensity: bool = False, explore: float = 0.0) -> list[str] | Choice:
        """The model for each prompt; with `rng`, by Thompson sampling (a posterior draw per cluster
        and model), which keeps trying models whose production record is still uncertain; with
        `explore` ε, a uniformly random model for a share ε of prompts. `with_propensity`: a
        `Choice`, with the probability each choice had, for the traffic log."""
        choice = self.choose_embeddings(embed_for(self, texts, encoder), lam, rng, explore=explore,
                                        draws=PROPENSITY_DRAWS if with_propensity else 0)
        return choice if with_propensity else choice.models

    def choose_embeddings(self, x: np.ndarray, lam: float | np.ndarray = 0.0, rng: np.random.Generator | None = None,
                          explore: float = 0.0, draws: int = PROPENSITY_DRAWS,
                          texts: list[str] | None = None) -> Choice:
        """`choose` on embedded prompts (`lam`: one, or one per prompt); `texts` applies recall.
        The propensity of a Thompson choice has no closed form: it is the share of `draws` further
        posterior draws (and the served one, so it is never 0) that choose the served model."""
        trained = self._trained_estimates(x)
        online = "online/alpha" in self.weights
        recall = self._recall_table(texts) if texts is not None else None

        def pick(shift: np.ndarray | None) -> np.ndarray:
            quality = trained.quality if shift is None else self._shifted(trained, shift)
            if recall is not None:
                quality = np.where(recall[0], recall[1], quality)
            return replace(trained, quality=quality).best_index(lam)

        m = len(self.models)
        served = pick(self._online_shift(rng) if online else None)
        probabilities = one_hot(served, m)
        if online and rng is not None and draws > 0:
            for _ in range(draws):
                probabilities += one_hot(pick(self._online_shift(rng)), m)
            probabilities /= draws + 1
        served, probabilities = explore_mix(served, probabilities, explore, rng)
        return Choice([self.models[i] for i in served], probabilities[np.arange(len(served)), served], probabilities)

    def predict(self, texts: list[str], encoder=None) -> RouterPrediction:
        """Estimates for prompt texts, embedded by `encoder` (a `SentenceEncoder`; by default the
        bundle's own, attached when the bundle loads the router), with known prompts recalled."""
        prediction = self.predict_embeddings(embed_for(self, texts, encoder))
        return self.apply_recall(texts, prediction)

    def apply_recall(self, texts: list[str], prediction: RouterPrediction) -> RouterPrediction:
        """Replace the estimate of every known prompt by the scores observed for it in training."""
        known, observed, recalled = self._recall_table(texts)
        prediction.quality = np.where(known, observed, prediction.quality)
        prediction.recalled = recalled
        return prediction

    def _recall_table(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(known, observed, recalled): per prompt and model whether training observed a score for
        this very prompt and that score; per prompt whether it is a training prompt."""
        n, m = len(texts), len(self.models)
        known, observed, recalled = np.zeros((n, m), dtype=bool), np.zeros((n, m)), np.zeros(n, dtype=bool)
        if "recall/keys" in self.weights:
            table = self.weights["recall/quality"]
            for i, text in enumerate(texts):
                row = self._recall_index.get(text_key(text))
                if row is not None:
                    known[i] = ~np.isnan(table[row])
                    observed[i] = np.nan_to_num(table[row])
                    recalled[i] = True
        return known, observed, recalled

    def save(self, folder: Path) -> list[Path]:
        from safetensors.numpy import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "router.json").write_text(json.dumps(self.meta, indent=2, sort_keys=True))
        save_file({k: np.ascontiguousarray(v) for k, v in self.weights.items()}, str(folder / "weights.safetensors"))
        return [folder / "router.json", folder / "weights.safetensors"]

    @classmethod
    def load(cls, folder: Path) -> Router:
        from safetensors.numpy import load_file

        folder = Path(folder)
        return cls(json.loads((folder / "router.json").read_text()), load_file(str(folder / "weights.safetensors")))
