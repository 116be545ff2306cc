"""Release gate: a challenger becomes `champion` only when it is at least as good as the one in service.

Both bundles are evaluated here, by the runtime's own loaders, on one frozen evaluation set: the
prompts of the first registered version's test split with every model's true quality (parquet:
`text`, `task`, `quality/<model>`), logged once to the registry and pinned by the registered model's
tags, so every later comparison uses the same prompts. Measured per bundle:

- `router_quality`: mean true quality of the model the bundle routes each prompt to (its router, or
  its KNN estimator when it has none; λ = 0); a prompt routed to a model added after training,
  which the set has no column for, scores that model's held-out label for it, else the lower bound
  of its held-out labels (`_unlabelled_scores`);
- `gap_closed`: (router − best single model) / (oracle − best single model) on the same prompts;
- `task_classifier_top1`: where the bundle has a task classifier and the set names tasks;
- `latency/<tier>/tpot_mae_ms`, `…/ttft_mae_ms`, `…/e2e_mape`: the held-out errors each tier's heads
  recorded in the manifest (lower is better);
- `policy/<name>/simulator_qos` (higher is better) and `…/simulator_e2e_mean_s` (lower): each learned
  routing policy's mean over the simulator workloads its training run evaluated it on (seeded, from
  the fleet's profiles), as recorded in the manifest.

The latency and policy figures are the bundle's own held-out evaluation, not replayed here: the
runtime has no simulator, and a champion's latency records may be ones the challenger trained on.

Rules (`ReleaseRules`, from the fleet file's `release` section): the challenger is promoted only
when every required check passed and no metric the champion has regresses by more than its
tolerance (default 0); a metric the champion has and the challenger lacks, or measures as NaN or
infinite, counts as a regression unless the fleet lists it in `release.optional`. With no champion
yet, only when it clears every configured floor (a NaN clears none).

With `release.replay` (`replay_verdict`), both bundles are also replayed on logged production
traffic (`artifacts.operating.replay`: requests with an outcome and the serving decision's propensity), and a
challenger whose paired difference with the champion lies below −tolerance with its whole interval
is held, even where the frozen set says it is better: the frozen set is last quarter's prompts, the
log is what the fleet serves now. The replay's figures are recorded with the decision (`gate.replay`).

The decision, its reasons and both versions' metrics are written to the challenger's model-version
tags; the registered model's `routeforge.champion_history` tag lists the champions in order, which
is what `rollback` walks back. A forced promotion records who asked and why.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.artifacts.bundle.registry import PUBLIC_KEY_TAG, download_artifacts
from routeforge.artifacts.bundle.signing import key_for
from routeforge.artifacts.bundle.verification import BundleVerificationError
from routeforge.artifacts.bundle.writer import sha256_file
from routeforge.artifacts.deciding.router import text_key
from routeforge.artifacts.operating.replay import read_logged_decisions, replay
from routeforge.registry.store import all_versions, latest_version

CHAMPION = "champion"
EVALUATION_TAG = "routeforge.evaluation_set"  # registered model: {"uri": ..., "sha256": ...}
HISTORY_TAG = "routeforge.champion_history"  # registered model: JSON list of versions
EVALUATION_HISTORY_TAG = "routeforge.evaluation_set_history"  # registered model: every replacement, why
DECISION_TAG = "gate.decision"  # model version: "promoted" or "held" once gated
CHECKS_TAG = "checks_passed"  # model version: "true" when every required asset check passed
RULES_TAG = "release_rules"  # model version: the rules in force when it was registered
LOWER_IS_BETTER_SUFFIXES = ("_mae_ms", "_mape", "_mean_s")


@dataclass(frozen=True)
class ReleaseRules:
    tolerance: dict[str, float] = field(default_factory=dict)  # metric -> allowed regression
    floors: dict[str, float] = field(default_factory=dict)  # metric -> least acceptable (most, for errors)
    default_tolerance: float = 0.0
    optional: tuple[str, ...] = ()  # metrics (or `prefix/`) a challenger may lack or measure as NaN
    replay: dict[str, Any] | None = None  # `core.config.fleet.ReplayGate` as a dict: judge on logged traffic too
    # credit an added model's own labels on evaluation prompts (`_unlabelled_scores`); rules recorded
    # before this field existed read as false
    trust_added_labels: bool = False

    def to_json(self) -> str:
        return json.dumps({"tolerance": self.tolerance, "floors": self.floors,
                           "default_tolerance": self.default_tolerance, "optional": list(self.optional),
                           "replay": self.replay, "trust_added_labels": self.trust_added_labels}, sort_keys=True)

    def is_optional(self, metric: str) -> bool:
        return any(metric == o or (o.endswith("/") and metric.startswith(o)) for o in self.optional)

    @classmethod
    def from_json(cls, text: str | None) -> ReleaseRules:
        if not text:
            return cls()
        raw = json.loads(text)
        return cls(**{**raw, "optional": tuple(raw.get("optional", ()))})


def lower_is_better(metric: str) -> bool:
    return metric.endswith(LOWER_IS_BETTER_SUFFIXES)


@dataclass
class Decision:
    promote: bool
    reasons: list[str]
    challenger: dict[str, float]
    champion: dict[str, float] | None
    champion_version: str | None = None
    forced_by: str | None = None
    force_reason: str | None = None
    replay: dict[str, Any] | None = None  # the logged-traffic replay (`replay_verdict`), when the rules ask

    def tags(self, evaluation_sha: str | None) -> dict[str, str]:
        out = {"gate.decision": "promoted" if self.promote else "held",
               "gate.reasons": json.dumps(self.reasons), "gate.champion_version": str(self.champion_version),
               "gate.evaluation_set_sha256": str(evaluation_sha)}
        if self.replay is not None:  # a tag value holds at most 5,000 characters in MLflow
            out["gate.replay"] = json.dumps({k: self.replay.get(k) for k in (
                "applied", "requests", "method", "difference", "logs", "note")})[:5000]
        if self.forced_by:
            out |= {"gate.forced_by": self.forced_by, "gate.force_reason": str(self.force_reason)}
        return out

    def scores(self) -> Iterator[tuple[str, str, float]]:
        """(side, metric, value) of every finite number either side scored on the frozen
        evaluation set, and the replay's estimates; side is `challenger`, `champion` or `replay`."""
        for side, values in (("challenger", self.challenger), ("champion", self.champion or {})):
            yield from ((side, k, float(v)) for k, v in values.items() if v is not None and math.isfinite(v))
        difference = (self.replay or {}).get("difference")
        if difference:
            yield from (("replay", f"difference_{k}", float(difference[k])) for k in ("value", "low", "high"))

    def figures(self) -> dict[str, float]:
        """The scores as MLflow metrics (`gate.challenger.<metric>`, `gate.champion.<metric>`):
        charted and compared in MLflow, where JSON in a tag is only text."""
        # MLflow metric names allow no '@': a tier `model@hardware` is written `model:hardware`
        return {f"gate.{side}.{k.replace('@', ':')}": v for side, k, v in self.scores()}


def decide(challenger: dict[str, float], champion: dict[str, float] | None, rules: ReleaseRules,
           checks_passed: bool) -> Decision:
    """The rule itself, free of any registry: see the module docstring."""
    reasons = []
    if not checks_passed:
        reasons.append("a required asset check did not pass")
    if champion is None:
        for metric, floor in sorted(rules.floors.items()):
            value = challenger.get(metric)
            if value is None:
                reasons.append(f"{metric}: not measured, floor {floor}")
            elif not math.isfinite(value):
                reasons.append(f"{metric} is {value} and clears no floor ({floor:.4g})")
            elif (value > floor) if lower_is_better(metric) else (value < floor):
                reasons.append(f"{metric} {value:.4g} does not clear the floor {floor:.4g}")
    else:
        missing = sorted(m for m in set(champion) - set(challenger) if not rules.is_optional(m))
        if missing:
            reasons.append(f"missing metrics the champion has: {', '.join(missing)}")
        for metric in sorted(set(challenger) & set(champion)):
            new, old = challenger[metric], champion[metric]
            if not math.isfinite(new):
                if not rules.is_optional(metric):
                    reasons.append(f"{metric} is {new} (the champion's is {old:.4g})")
                continue
            if not math.isfinite(old):  # nothing to regress from
                continue
            allowed = rules.tolerance.get(metric, rules.default_tolerance)
            worse_by = (new - old) if lower_is_better(metric) else (old - new)
            if worse_by > allowed + 1e-12:
                reasons.append(f"{metric} regressed {old:.4g} → {new:.4g} (tolerance {allowed:g})")
    return Decision(promote=not reasons, reasons=reasons or ["no regression beyond tolerance"
                                                             if champion is not None else "clears every floor"],
                    challenger=challenger, champion=champion)


def replay_verdict(spec: dict[str, Any], challenger, champion) -> tuple[str | None, dict[str, Any]]:
    """(a reason to hold or None, the record) from replaying both loaded bundles on the logged
    traffic `spec["logs"]` names (`core.config.fleet.ReplayGate`). Fewer usable requests than
    `min_requests`: recorded, not applied (a thin log must not hold every release)."""
    from upath import UPath

    logs = UPath(spec["logs"])
    if not logs.exists():  # an empty replay would pass every challenger silently
        raise ValueError(f"release.replay.logs: {spec['logs']} does not exist")
    decisions = read_logged_decisions(logs)
    record: dict[str, Any] = {"logs": spec["logs"], "requests": len(decisions), "method": spec.get("method", "dr"),
                              "skipped": dict(decisions.skipped), "applied": False}
    if len(decisions) < spec.get("min_requests", 200):
        record["note"] = (f"{len(decisions)} logged requests with an outcome and a propensity, fewer than "
                          f"min_requests {spec.get('min_requests', 200)}: not applied")
        return None, record
    found = replay(challenger, decisions, spec.get("lam", 0.0), champion, record["method"], spec.get("level", 0.95))
    record |= found.to_json() | {"applied": True, "logs": spec["logs"]}
    diff, tolerance = found.difference, float(spec.get("tolerance", 0.0))
    if diff.high < -tolerance:
        return (f"logged traffic: worse than the champion by {-diff.value:.4g} "
                f"({diff.method}, {diff.level:.0%} interval [{diff.low:.4g}, {diff.high:.4g}], "
                f"{found.requests} requests, tolerance {tolerance:g})"), record
    return None, record


def _quality_columns(table) -> list[str]:
    return [c for c in table.column_names if c.startswith("quality/")]


def _unlabelled_scores(bundle, texts: list[str], chosen: list[str], index: dict[str, int],
                       trust_labels: bool = False) -> dict[int, float]:
    """The score of each prompt (by position) routed to a model the evaluation set has no column for
    (one added after training, `routeforge bundle add-model`): routeforge's own score of the model's
    response to that prompt where add-model scored one (`training.predictors.label_audit`), else 0;
    with `trust_labels` (`ReleaseRules.trust_added_labels`) the label given for that prompt and held
    out of the fit, else the held-out labels' lower bound. Never skipped: skipping them let labels
    crafted on the champion's worst prompts lift the measured quality; and labels are not credited
    by default because labels that lie consistently lie in the held-out part too."""
    unlabelled = [i for i, m in enumerate(chosen) if m not in index]
    if not unlabelled:
        return {}
    added = {a["name"]: a.get("holdout", {}) for a in bundle.router().meta.get("added_models", [])} \
        if bundle.has_kind("router") else {}
    out = {}
    for i in unlabelled:
        holdout, key = added.get(chosen[i], {}), text_key(texts[i]).hex()
        verified = holdout.get("verified", {}).get(key)
        if verified is not None:
            out[i] = float(verified)
        elif trust_labels:
            label = holdout.get("by_prompt", {}).get(key)
            out[i] = float(label if label is not None else holdout.get("lower", 0.0))
        else:
            out[i] = 0.0
    return out


def evaluate_bundle(bundle, evaluation, trust_added_labels: bool = False) -> dict[str, float]:
    """Metrics of a loaded `RouterBundle` on an evaluation table (see the module docstring); an added
    model's prompts score as `_unlabelled_scores` says."""
    models = [c.removeprefix("quality/") for c in _quality_columns(evaluation)]
    truth = np.column_stack([np.asarray(evaluation.column(f"quality/{m}").to_pylist(), dtype=float) for m in models])
    complete = ~np.isnan(truth).any(axis=1)
    texts = [t for t, ok in zip(evaluation.column("text").to_pylist(), complete) if ok]
    truth = truth[complete]
    if not len(texts):
        raise ValueError("evaluation set: no prompt has a quality for every model")
    chosen = bundle.route(texts).choice
    index = {m: i for i, m in enumerate(models)}
    unlabelled = _unlabelled_scores(bundle, texts, chosen, index, trust_added_labels)
    routed = np.array([unlabelled[i] if i in unlabelled else truth[i, index[m]] for i, m in enumerate(chosen)])
    out: dict[str, float] = {"router_quality": float(np.mean(routed))}
    best, oracle = float(truth.mean(axis=0).max()), float(truth.max(axis=1).mean())
    if oracle > best:
        out["gap_closed"] = (out["router_quality"] - best) / (oracle - best)
    if any(c.name == "task_classifier" for c in bundle.manifest.components) and "task" in evaluation.column_names:
        tasks = [t for t, ok in zip(evaluation.column("task").to_pylist(), complete) if ok]
        top = bundle.task_classifier().predict(texts)["top"]
        out["task_classifier_top1"] = float(np.mean([p[0] == t for p, t in zip(top, tasks)]))
    for c in bundle.manifest.components:
        if c.kind == "routing_policy" and c.config.get("policy_kind") != "heuristic":
            for key in ("simulator_qos", "simulator_e2e_mean_s"):
                if key in c.metrics and math.isfinite(c.metrics[key]):
                    out[f"policy/{c.config['policy']}/{key}"] = float(c.metrics[key])
        if c.kind == "latency_heads":
            for key in ("tpot_mae_ms_served", "ttft_mae_ms_served", "e2e_mape_served"):
                if key in c.metrics and math.isfinite(c.metrics[key]):
                    out[f"latency/{c.config['tier']}/{key.removesuffix('_served')}"] = float(c.metrics[key])
    return out


@dataclass
class ModelRegistry:
    """The registered model's release state in MLflow's model registry (a client bound to one tracking
    URI); not to be confused with `artifacts.common.extensions.Registry`, a registry of kinds."""

    tracking_uri: str
    name: str

    def __post_init__(self):
        from mlflow import MlflowClient

        self.client = MlflowClient(self.tracking_uri)

    def model_tags(self) -> dict[str, str]:
        return dict(self.client.get_registered_model(self.name).tags)

    def pinned_evaluation_sha(self) -> str | None:
        """sha256 of the frozen evaluation set, None before the first registration froze one."""
        from mlflow.exceptions import MlflowException

        try:
            pinned = self.model_tags().get(EVALUATION_TAG)
        except MlflowException:  # no registered model yet
            return None
        return json.loads(pinned)["sha256"] if pinned else None

    def champion_version(self) -> str | None:
        from mlflow.exceptions import MlflowException

        try:
            return str(self.client.get_model_version_by_alias(self.name, CHAMPION).version)
        except MlflowException:
            return None

    def latest_version(self) -> str:
        latest = latest_version(self.name, self.client)
        if latest is None:
            raise ValueError(f"registered model {self.name!r} has no versions")
        return latest[0]

    def version_tags(self, version: str) -> dict[str, str]:
        return dict(self.client.get_model_version(self.name, version).tags)

    def history(self) -> list[str]:
        return json.loads(self.model_tags().get(HISTORY_TAG, "[]"))

    def gated(self, version: str) -> bool:
        """Whether the gate has decided on `version` (a run killed after registering it has not)."""
        return DECISION_TAG in self.version_tags(version)

    def ungated_versions(self) -> list[str]:
        """Versions with no gate decision, oldest first."""
        return [v for v in all_versions(self.name, self.client) if not self.gated(v)]

    def replace_evaluation_set(self, path: Path, reason: str, run_id: str | None = None) -> str:
        """Pin `path` as the frozen evaluation set instead of the current one, recording who, when
        and why in `routeforge.evaluation_set_history` (an explicit command: `routeforge bundle
        freeze-evaluation`); returns its sha256. Logged to `run_id`, else the newest version's run."""
        import getpass
        from datetime import UTC, datetime


        if not (reason and reason.strip()):
            raise ValueError("replacing the frozen evaluation set needs a reason; it is recorded")
        run_id = run_id or self.client.get_model_version(self.name, self.latest_version()).run_id
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        self.client.log_artifact(run_id, str(path), f"evaluation/{stamp}")
        sha = sha256_file(Path(path))
        tags = self.model_tags()
        history = json.loads(tags.get(EVALUATION_HISTORY_TAG, "[]"))
        history.append({"replaced": json.loads(tags[EVALUATION_TAG])["sha256"] if EVALUATION_TAG in tags else None,
                        "sha256": sha, "by": getpass.getuser(), "at": stamp, "reason": reason.strip()})
        self.client.set_registered_model_tag(self.name, EVALUATION_HISTORY_TAG, json.dumps(history))
        self.client.set_registered_model_tag(self.name, EVALUATION_TAG, json.dumps(
            {"uri": f"runs:/{run_id}/evaluation/{stamp}/{Path(path).name}", "sha256": sha}))
        return sha

    def evaluation_set(self, candidate: Path | None = None, run_id: str | None = None) -> tuple[Path, str]:
        """The frozen evaluation set (a local parquet path and its sha256). The first call with a
        `candidate` freezes it: logs it to `run_id` under `evaluation/` and pins it in the registered
        model's tags; every later call downloads the pinned one, whatever `candidate` says."""
        import mlflow

        pinned = self.model_tags().get(EVALUATION_TAG)
        if pinned is None:
            if candidate is None or run_id is None:
                raise ValueError(f"registered model {self.name!r} has no frozen evaluation set yet")
            self.client.log_artifact(run_id, str(candidate), "evaluation")
            pinned = json.dumps({"uri": f"runs:/{run_id}/evaluation/{Path(candidate).name}",
                                 "sha256": sha256_file(Path(candidate))})
            self.client.set_registered_model_tag(self.name, EVALUATION_TAG, pinned)
        spec = json.loads(pinned)
        mlflow.set_tracking_uri(self.tracking_uri)
        local = download_artifacts(spec["uri"])
        if sha256_file(local) != spec["sha256"]:
            raise ValueError(f"frozen evaluation set {spec['uri']}: sha256 differs from the pinned one")
        return local, spec["sha256"]

    def bundle(self, version: str, public_key: Path | None, workdir: Path, allow_unsigned: bool = False):
        """Version `version`, downloaded under `workdir`, verified and loaded (`RouterBundle`), with
        the trusted key of the id the version was signed with (`signing.key_for`: after a rotation,
        the retired key beside `public_key`)."""
        key = key_for(public_key, self.version_tags(version).get("signing_key_id"))
        return load_bundle(f"models:/{self.name}/{version}", workdir / f"v{version}", self.tracking_uri,
                           public_key=key, allow_unsigned=allow_unsigned)

    def move_champion(self, version: str, decision: Decision, evaluation_sha: str | None,
                      signer: Path | None = None) -> None:
        """Point `champion` at `version`; `signer`: the public key it verified with, which the
        registry's hint (`routeforge.public_key`, for trust on first use) then names: the hint moves
        to a new key only when a version signed by it is promoted, never at registration."""
        self.client.set_registered_model_alias(self.name, CHAMPION, version)
        if signer is not None and Path(signer).is_file():
            self.client.set_registered_model_tag(self.name, PUBLIC_KEY_TAG, Path(signer).read_text())
        history = [v for v in self.history() if v != version] + [version]
        self.client.set_registered_model_tag(self.name, HISTORY_TAG, json.dumps(history))
        self.record(version, decision, evaluation_sha)

    def record(self, version: str, decision: Decision, evaluation_sha: str | None) -> None:
        """The decision as the version's tags, and its figures as metrics of the version's logged
        model (MLflow 3 shows them on the version's page) and of the run that registered it."""
        import time

        for key, value in decision.tags(evaluation_sha).items():
            self.client.set_model_version_tag(self.name, version, key, value)
        registered = self.client.get_model_version(self.name, version)
        now = int(time.time() * 1000)
        for key, value in decision.figures().items():
            self.client.log_metric(registered.run_id, key, value, timestamp=now, model_id=registered.model_id)


def gate(registry: ModelRegistry, version: str, public_key: Path | None, workdir: Path,
         rules: ReleaseRules | None = None, force: bool = False, reason: str | None = None,
         evaluation: tuple[Path, str] | None = None, allow_unsigned: bool = False,
         log: Callable[[str], None] | None = None) -> Decision:
    """Compare `version` with the current champion on the frozen evaluation set (`evaluation`, the
    (path, sha256) `ModelRegistry.evaluation_set` gave, or fetched here) and move the alias when the rules
    (the version's own recorded rules unless `rules` is given) allow it, or when forced with a
    reason. Records the decision either way. `log` gets a line per stage with its time: fetching,
    verifying and evaluating two bundles can take minutes, which a gate should not spend silently."""
    if force and not (reason and reason.strip()):
        raise ValueError("--force needs --reason: a forced promotion records who asked and why")
    tags = registry.version_tags(version)
    rules = rules or ReleaseRules.from_json(tags.get(RULES_TAG))
    evaluation, sha = evaluation or registry.evaluation_set()
    champion = registry.champion_version()
    if champion == version:
        raise ValueError(f"version {version} of {registry.name!r} is already the champion")
    import pyarrow.parquet as pq

    table = pq.read_table(evaluation)
    try:
        with _timed(log, f"version {version}: fetched and verified"):
            challenger_bundle = registry.bundle(version, public_key, workdir, allow_unsigned)
    except BundleVerificationError as exc:
        # held and recorded, so the versions after it are still gated (an unsigned `add-model`
        # version made every later `bundle gate` abort on it)
        hint = ("; if the signing key was rotated, its old public key belongs in retired/ beside the trusted one "
                "(`routeforge keys rotate --retire-public`)" if "signed by another key" in str(exc) else "")
        decision = Decision(promote=False, reasons=[f"does not verify: {exc}{hint}"], challenger={}, champion=None)
        decision.champion_version = champion
        registry.record(version, decision, sha)
        return decision
    champion_bundle = None
    if champion is not None:
        with _timed(log, f"champion version {champion}: fetched and verified"):
            champion_bundle = registry.bundle(champion, public_key, workdir, allow_unsigned)
    with _timed(log, f"version {version}: evaluated on {table.num_rows} frozen rows"):
        challenger_metrics = evaluate_bundle(challenger_bundle, table, rules.trust_added_labels)
    champion_metrics = None
    if champion_bundle is not None:
        with _timed(log, f"champion version {champion}: evaluated on {table.num_rows} frozen rows"):
            champion_metrics = evaluate_bundle(champion_bundle, table, rules.trust_added_labels)
    decision = decide(challenger_metrics, champion_metrics, rules, tags.get(CHECKS_TAG) == "true")
    decision.champion_version = champion
    if rules.replay and champion_bundle is not None:
        with _timed(log, "both versions replayed on the logged traffic"):
            held, decision.replay = replay_verdict(rules.replay, challenger_bundle, champion_bundle)
        if held:
            decision.reasons = [r for r in decision.reasons if r != "no regression beyond tolerance"] + [held]
            decision.promote = False
    if force and not decision.promote:
        decision.reasons = [f"forced over: {r}" for r in decision.reasons]
        decision.promote, decision.forced_by, decision.force_reason = True, getpass.getuser(), reason
    if decision.promote:
        signer = None if public_key is None else key_for(public_key, tags.get("signing_key_id"))
        registry.move_champion(version, decision, sha, signer)
    else:
        registry.record(version, decision, sha)
    return decision


@contextlib.contextmanager
def _timed(log: Callable[[str], None] | None, what: str) -> Iterator[None]:
    """Logs "gate: <what> in 1.2 s" when the block ends (not when it raises: the error says enough)."""
    start = time.perf_counter()
    yield
    if log is not None:
        log(f"gate: {what} in {time.perf_counter() - start:.1f} s")


def rollback(registry: ModelRegistry, reason: str | None = None) -> tuple[str, str]:
    """Move `champion` back to the previous champion; returns (from, to)."""
    history = registry.history()
    current = registry.champion_version()
    if current is None or len(history) < 2:
        raise ValueError(f"registered model {registry.name!r} has no earlier champion to roll back to")
    previous = history[-2] if history[-1] == current else history[-1]
    registry.client.set_registered_model_alias(registry.name, CHAMPION, previous)
    registry.client.set_registered_model_tag(registry.name, HISTORY_TAG,
                                             json.dumps([v for v in history if v != current]))
    registry.client.set_model_version_tag(registry.name, current, "gate.rolled_back",
                                          json.dumps({"by": getpass.getuser(), "reason": reason, "to": previous}))
    return current, previous


def decision_summary(decision: Decision) -> dict[str, Any]:
    return {"promoted": decision.promote, "reasons": decision.reasons, "champion_version": decision.champion_version,
            "challenger": decision.challenger, "champion": decision.champion, "forced_by": decision.forced_by,
            "replay": decision.replay}
