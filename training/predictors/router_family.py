"""The router estimator family: each candidate fits on embeddings and per-model quality labels and
returns the arrays `artifacts.deciding.router` predicts with, so what cross-validation scores is exactly
what the bundle serves.

- `knn`: stores the training embeddings and labels (the runtime does the cosine search);
- `mlp`: one multi-output network on the frozen embedding (logistic heads when `hidden` is 0),
  soft binary cross-entropy, since labels are graded scores in [0, 1];
- `mf`: RouteLLM's matrix factorisation: a projection P of the prompt embedding against learned model
  embeddings v_m, σ(⟨v_m, P·x⟩ + b_m).
- `dc`: RouterDC's dual contrastive objective on a projection head over the frozen encoder: the
  cosine of the projected prompt with learned model embeddings is trained with the sample–LLM loss
  (each of the top-k models against the bottom-k, positives that scored 0 and negatives that scored
  above 0.5 left out) plus the sample–sample loss over k-means clusters of the prompts (one same-cluster
  positive against H other-cluster negatives); a per-model logistic map of the cosine (fitted after
  training) turns it into a quality estimate. RouterDC fine-tunes the whole encoder; here it stays
  frozen, which keeps cross-validation affordable on a CPU.
- `task_mixture`: the mean quality of each training task (k-means clusters where tasks are
  unknown), mixed by a multinomial logistic classifier's posterior of the prompt's task:
  Σ_t p(t | x) · q̄_t. Why: on dcrouter most of what any estimator gains over the best single model
  is recognising the kind of prompt (docs/results.md); a posterior spreads a prompt that resembles
  several tasks over their means instead of committing to one, which also routes prompts of a task
  never seen more safely than their nearest task's best model.

Labels may be missing (NaN) for some (prompt, model) pairs; the losses and the KNN vote skip them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from routeforge.artifacts.common.extensions import Registry
from routeforge.artifacts.deciding.router import MEMBER_KINDS, MemberRule, predict_member
from routeforge.training.predictors.router_dc_finetune import sample_llm_loss, sample_sample_loss


@dataclass(frozen=True)
class Candidate:
    """One estimator configuration: `kind` and its few hyperparameters."""

    kind: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.kind + "".join(f"_{k}{v:g}" if isinstance(v, float) else f"_{k}{v}"
                                   for k, v in sorted(self.params.items()))


def _filled(y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(labels with NaN → prior, mask of known labels, per-model prior)."""
    known = ~np.isnan(y)
    prior = np.where(known.any(0), np.nansum(y, 0) / np.maximum(known.sum(0), 1), 0.0)
    return np.where(known, y, prior), known, prior


def _train_torch(net, x: np.ndarray, y: np.ndarray, epochs: int, weight_decay: float, seed: int,
                 lr: float = 1e-3, batch: int = 128) -> None:
    import torch

    _, known, _ = _filled(y)
    xt = torch.tensor(x, dtype=torch.float32)
    yt = torch.tensor(np.nan_to_num(y), dtype=torch.float32)
    mt = torch.tensor(known, dtype=torch.float32)
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=weight_decay)
    gen = torch.Generator().manual_seed(seed)
    net.train()
    for _ in range(epochs):
        perm = torch.randperm(len(xt), generator=gen)
        for i in range(0, len(xt), batch):
            b = perm[i:i + batch]
            loss = torch.nn.functional.binary_cross_entropy_with_logits(net(xt[b]), yt[b], weight=mt[b],
                                                                        reduction="sum") / mt[b].sum().clamp(min=1)
            opt.zero_grad()
            loss.backward()
            opt.step()
    net.eval()


Fitter = Callable[[Candidate, np.ndarray, np.ndarray, int, "list[str] | np.ndarray | None"], dict[str, np.ndarray]]
# member kind → how it is fitted: (candidate, x, y, seed, tasks) → the weights its rule in
# `routeforge.artifacts.deciding.router.MEMBER_KINDS` predicts with; filled by `router_estimator` only.
# Metadata: `grid(settings)`, the parameter sets cross-validation tries (`candidates`; none: the kind
# is fitted only when a caller names it), and `params(weights)`, what the member's spec adds.
MEMBER_FITTERS: Registry[Fitter] = Registry("estimator kind", ("routeforge.training.predictors.router_family",))


def router_estimator(name: str, predict: MemberRule | None = None, **metadata: Any) -> Callable[[Fitter], Fitter]:
    """Register a router estimator kind once: the decorated fitter, and with `predict` its prediction
    rule in the runtime's `MEMBER_KINDS` (what a router service runs), under one name. Without
    `predict` the runtime must already have the rule (the built-in kinds keep theirs in
    `artifacts/deciding/router.py`, which a service imports without the training stack); a fitter whose
    output no runtime rule reads is refused here, when it registers, not when a bundle fails to load."""

    def add(fit: Fitter) -> Fitter:
        if predict is not None:
            MEMBER_KINDS.add(name, predict, predict.__module__, predict.__qualname__)
        elif name not in {e.name for e in MEMBER_KINDS.registered()}:
            raise ValueError(f"router estimator {name!r}: the runtime has no rule to predict with it; pass "
                             "predict=(params, weights, x) -> (n, m) quality")
        MEMBER_FITTERS.add(name, fit, fit.__module__, fit.__qualname__, **metadata)
        return fit

    return add


def fit_candidate(cand: Candidate, x: np.ndarray, y: np.ndarray, seed: int = 0,
                  tasks: list[str] | np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Fit one candidate; returns the member's weights (float32 arrays) for `predict_member`.
    `tasks` (one per row) are used by the kinds that group prompts (`task_mixture`)."""
    if cand.kind not in MEMBER_FITTERS:
        raise ValueError(MEMBER_FITTERS.unknown(cand.kind))
    return MEMBER_FITTERS.get(cand.kind)(cand, x, y, seed, tasks)


def _knn_grid(settings) -> list[dict[str, Any]]:
    budget = {"max_keys": settings.knn_max_keys} if settings.knn_max_keys is not None else {}
    return [{"k": k, "prior_strength": a, **budget} for k in settings.knn_k for a in settings.knn_prior_strength]


@router_estimator("knn", grid=_knn_grid)
def _fit_knn(cand: Candidate, x: np.ndarray, y: np.ndarray, seed: int, tasks) -> dict[str, np.ndarray]:
    """Every training prompt a key, or a seeded uniform sample of `max_keys` of them (the prior from
    every label): the runtime compares each request with every key, so keys bound its time, the
    bundle's size and cross-validation's prompts × keys."""
    filled, _, prior = _filled(y)
    limit = cand.params.get("max_keys")
    if limit is not None and len(x) > limit:
        keep = np.sort(np.random.default_rng(seed).choice(len(x), size=int(limit), replace=False))
        x, filled = x[keep], filled[keep]
    return {"keys": x.astype(np.float32), "labels": filled.astype(np.float32), "prior": prior.astype(np.float32)}


def _mlp_layers(weights: dict[str, np.ndarray]) -> dict[str, Any]:
    return {"layers": sum(1 for k in weights if k.startswith("w"))}


@router_estimator("mlp", params=_mlp_layers,
               grid=lambda s: [{"hidden": h, "weight_decay": s.mlp_weight_decay, "epochs": s.mlp_epochs}
                               for h in s.mlp_hidden])
def _fit_mlp(cand: Candidate, x: np.ndarray, y: np.ndarray, seed: int, tasks) -> dict[str, np.ndarray]:
    import torch

    torch.manual_seed(seed)
    d, m = x.shape[1], y.shape[1]
    hidden = int(cand.params["hidden"])
    layers = ([torch.nn.Linear(d, hidden), torch.nn.GELU(approximate="tanh"), torch.nn.Dropout(0.1),
               torch.nn.Linear(hidden, m)] if hidden else [torch.nn.Linear(d, m)])
    net = torch.nn.Sequential(*layers)
    _train_torch(net, x, y, int(cand.params["epochs"]), float(cand.params["weight_decay"]), seed)
    linears = [layer for layer in net if isinstance(layer, torch.nn.Linear)]
    return {key: value for i, lin in enumerate(linears)
            for key, value in ((f"w{i}", lin.weight.detach().numpy().T.astype(np.float32)),
                               (f"b{i}", lin.bias.detach().numpy().astype(np.float32)))}


@router_estimator("mf", grid=lambda s: [{"dim": r, "epochs": s.mf_epochs} for r in s.mf_dim])
def _fit_mf(cand: Candidate, x: np.ndarray, y: np.ndarray, seed: int, tasks) -> dict[str, np.ndarray]:
    import torch

    torch.manual_seed(seed)
    _, _, prior = _filled(y)
    d, m = x.shape[1], y.shape[1]
    dim = int(cand.params["dim"])

    class MF(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(d, dim, bias=False)
            self.model_emb = torch.nn.Parameter(torch.randn(m, dim) * 0.1)
            logit_prior = np.log(np.clip(prior, 1e-3, 1 - 1e-3) / (1 - np.clip(prior, 1e-3, 1 - 1e-3)))
            self.model_bias = torch.nn.Parameter(torch.tensor(logit_prior, dtype=torch.float32))

        def forward(self, inputs):
            return self.proj(inputs) @ self.model_emb.T + self.model_bias

    net = MF()
    _train_torch(net, x, y, int(cand.params["epochs"]), float(cand.params.get("weight_decay", 1e-4)), seed)
    return {"proj": net.proj.weight.detach().numpy().T.astype(np.float32),
            "model_emb": net.model_emb.detach().numpy().astype(np.float32),
            "model_bias": net.model_bias.detach().numpy().astype(np.float32)}


@router_estimator("dc", grid=lambda s: [{"dim": r, "epochs": s.dc_epochs, "clusters": s.guard_clusters}
                                     for r in s.dc_dim])
def _fit_dc(cand: Candidate, x: np.ndarray, y: np.ndarray, seed: int, tasks) -> dict[str, np.ndarray]:
    import torch

    torch.manual_seed(seed)
    return _fit_dual_contrastive(cand, x, y, seed)


@router_estimator("task_mixture", grid=lambda s: [{"C": c, "clusters": s.guard_clusters} for c in s.mixture_c])
def _fit_mixture(cand: Candidate, x: np.ndarray, y: np.ndarray, seed: int, tasks) -> dict[str, np.ndarray]:
    return _fit_task_mixture(cand, x, y, seed, tasks)


def _fit_dual_contrastive(cand: Candidate, x: np.ndarray, y: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    import torch
    import torch.nn.functional as F
    from sklearn.cluster import KMeans

    p = cand.params
    dim, top_k, last_k, h_neg = int(p["dim"]), int(p.get("top_k", 3)), int(p.get("last_k", 3)), int(p.get("H", 3))
    temperature, cluster_weight = float(p.get("temperature", 0.2)), float(p.get("cluster_weight", 1.0))
    filled, known, _ = _filled(y)
    n, d = x.shape
    m = y.shape[1]
    clusters = KMeans(int(p.get("clusters", 8)), n_init=2, random_state=seed).fit_predict(x)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    proj = torch.nn.Sequential(torch.nn.Linear(d, dim), torch.nn.GELU(approximate="tanh"), torch.nn.Linear(dim, dim))
    emb = torch.nn.Parameter(torch.randn(m, dim, generator=gen) * 0.78)
    opt = torch.optim.AdamW([*proj.parameters(), emb], lr=float(p.get("lr", 1e-3)), weight_decay=1e-4)
    xt, yt = torch.tensor(x, dtype=torch.float32), torch.tensor(np.nan_to_num(y), dtype=torch.float32)
    kt = torch.tensor(known)
    ct = torch.tensor(clusters)
    for _ in range(int(p["epochs"])):
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, 64):
            b = perm[i:i + 64]
            z = F.normalize(proj(xt[b]), dim=1)
            logits = z @ F.normalize(emb, dim=1).T / temperature
            loss = sample_llm_loss(logits, yt[b], top_k, last_k, known=kt[b])
            if cluster_weight > 0:
                loss = loss + cluster_weight * sample_sample_loss(z, ct[b], h_neg, gen, temperature)
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        cos = (F.normalize(proj(xt), dim=1) @ F.normalize(emb, dim=1).T).numpy()
    scale, bias = np.ones(m), np.zeros(m)
    for j in range(m):  # per-model logistic map cos → quality, on the known labels (soft targets)
        a = torch.zeros(2, requires_grad=True)
        c, t, w = (torch.tensor(cos[:, j], dtype=torch.float32), torch.tensor(filled[:, j], dtype=torch.float32),
                   torch.tensor(known[:, j], dtype=torch.float32))
        lbfgs = torch.optim.LBFGS([a], max_iter=100)

        def closure():
            lbfgs.zero_grad()
            out = F.binary_cross_entropy_with_logits(a[0] * c + a[1], t, weight=w)
            out.backward()
            return out

        lbfgs.step(closure)
        scale[j], bias[j] = float(a[0].detach()), float(a[1].detach())
    linears = [layer for layer in proj if isinstance(layer, torch.nn.Linear)]
    return {"w0": linears[0].weight.detach().numpy().T.astype(np.float32),
            "b0": linears[0].bias.detach().numpy().astype(np.float32),
            "w1": linears[1].weight.detach().numpy().T.astype(np.float32),
            "b1": linears[1].bias.detach().numpy().astype(np.float32),
            "model_emb": F.normalize(emb, dim=1).detach().numpy().astype(np.float32),
            "scale": scale.astype(np.float32), "bias": bias.astype(np.float32)}


def kmeans_size(x: np.ndarray, k: int) -> int:
    """k capped by the data: at least 20 prompts a cluster, no more clusters than distinct
    embeddings (a shared prompt prefix cut by truncation makes identical ones)."""
    distinct = len(np.unique(np.round(x, 4), axis=0))
    return max(1, min(k, len(x) // 20 or 1, distinct))


def _fit_task_mixture(cand: Candidate, x: np.ndarray, y: np.ndarray, seed: int,
                      tasks: list[str] | np.ndarray | None) -> dict[str, np.ndarray]:
    """Groups: the tasks where more than one is known, else `clusters` k-means clusters. The
    classifier is scikit-learn's multinomial logistic regression (L2, inverse strength `C`), kept as
    one softmax layer: `w` (d, G), `b` (G); `group_quality` (G, m) the groups' mean labels (a model
    with no label in a group gets its overall mean)."""
    import warnings

    from sklearn.cluster import KMeans
    from sklearn.linear_model import LogisticRegression

    filled, known, prior = _filled(y)
    if tasks is not None and len(set(tasks)) > 1:
        names, groups = np.unique(np.asarray(tasks, dtype=str), return_inverse=True)
    else:
        k = kmeans_size(x, int(cand.params.get("clusters", 8)))
        groups = KMeans(k, n_init=4, random_state=seed).fit_predict(x) if k > 1 else np.zeros(len(x), int)
        names = np.arange(int(groups.max()) + 1)
    n_groups, d = len(names), x.shape[1]
    quality = np.stack([np.where(known[groups == g].any(0), np.nansum(np.where(known, y, 0)[groups == g], 0)
                                 / np.maximum(known[groups == g].sum(0), 1), prior) for g in range(n_groups)])
    w, b = np.zeros((d, n_groups)), np.zeros(n_groups)
    present = np.unique(groups)
    if len(present) > 1:
        with warnings.catch_warnings():  # lbfgs may stop at max_iter on a separable fold: still usable
            warnings.simplefilter("ignore")
            clf = LogisticRegression(C=float(cand.params["C"]), max_iter=2000, random_state=seed).fit(x, groups)
        coef, intercept = clf.coef_, clf.intercept_
        if len(present) == 2:  # scikit-learn keeps one row for two classes: softmax([0, z]) = sigmoid(z)
            coef, intercept = np.vstack([np.zeros_like(coef), coef]), np.concatenate([[0.0], intercept])
        w[:, present], b[present] = coef.T, intercept
        b[np.setdiff1d(np.arange(n_groups), present)] = -np.inf
    return {"w": w.astype(np.float32), "b": b.astype(np.float32), "group_quality": quality.astype(np.float32)}


def member_params(cand: Candidate, weights: dict[str, np.ndarray]) -> dict[str, Any]:
    """The JSON parameters `predict_member` needs beside the arrays."""
    extra = MEMBER_FITTERS.entry(cand.kind).metadata.get("params")  # what the fitter registered, if anything
    return {**(extra(weights) if extra else {}), **cand.params}


def fit_predict(cand: Candidate, x_fit: np.ndarray, y_fit: np.ndarray, x_pred: np.ndarray,
                seed: int = 0, tasks_fit: list[str] | np.ndarray | None = None) -> np.ndarray:
    weights = fit_candidate(cand, x_fit, y_fit, seed, tasks_fit)
    return predict_member(cand.kind, member_params(cand, weights), weights, x_pred.astype(np.float32))


def candidates(settings) -> list[Candidate]:
    """The grid named by `RouterSelectionSettings`: each registered kind's `grid`, in registration order."""
    return [Candidate(entry.name, params) for entry in MEMBER_FITTERS.entries()
            for params in entry.metadata.get("grid", lambda _: [])(settings)]
