"""The runtime loader: from a folder or an MLflow URI to a verified, ready-to-use router bundle.

`load_bundle` resolves the trusted key (`verification.resolve_key`), fetches the bundle
(`download.fetch_verified`: a folder as it is, a registered version through the bundle cache) and
verifies it (`verification.verify_bundle`) before a `RouterBundle` exists. A component is hashed
again when it is first loaded (`RouterBundle.component`), so a file changed after verification is
refused, not used.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from routeforge.artifacts.bundle.download import fetch_verified
from routeforge.artifacts.bundle.manifest import Manifest
from routeforge.artifacts.bundle.plain_files import NotPlainFile, copy_plain
from routeforge.artifacts.bundle.verification import BundleVerificationError, resolve_key
from routeforge.artifacts.common import temporary
from routeforge.artifacts.deciding.components import component_kind
from routeforge.artifacts.deciding.recommendation import recommend

if TYPE_CHECKING:  # numpy is imported where routing needs it: `bundle verify` stays light
    import numpy as np


@dataclass(frozen=True)
class Routing:
    """What `RouterBundle.route` decided: the estimates (`.models`, `.quality`, `.output_tokens`,
    `.cost`), the model chosen per prompt, and which estimator made them."""

    prediction: Any
    choice: list[str]
    estimator: str
    setting: Any = None  # the `artifacts.deciding.budget.Setting` a target picked λ by, when one was given
    propensity: Any = None  # (n,) the probability each choice had, when asked (`with_propensity`)

    def log_fields(self, i: int) -> dict[str, Any]:
        """What a traffic log keeps of prompt i's decision, under the line's `routing` key, so that
        a challenger can later be judged on the traffic (`routeforge bundle replay`)."""
        if self.propensity is None:
            raise ValueError("route(..., with_propensity=True) gives the propensities a log needs")
        return {"propensity": float(self.propensity[i]), "estimator": self.estimator}


@dataclass
class RouterBundle:
    """A verified bundle folder. `component(name)` loads any component with the class registered for
    its kind (`routeforge.artifacts.deciding.components`), once; the typed accessors below are shorthands."""

    root: Path
    manifest: Manifest
    _loaded: dict = field(default_factory=dict, repr=False)
    _snapshot: Path | None = field(default=None, repr=False)

    @property
    def models(self) -> list[str]:
        return [m.name for m in self.manifest.fleet.models]

    def verified_copy(self, name: str) -> Path:
        """The folder of a private copy of component `name` (in this bundle's snapshot, a temporary
        folder of this process, removed when the bundle is collected or the process exits), each file
        hashed as it was copied and checked against the manifest: what a loader reads is exactly what
        was signed, even if the bundle folder is edited or a file swapped between check and use."""
        if self._snapshot is None:
            self._snapshot = temporary.held("verified", owner=self)
        folder = self._snapshot / name
        if folder.is_dir():
            return folder
        entry = self.manifest.component(name)
        scratch = self._snapshot / f".{name}.partial"
        problems = []
        for file in entry.files:
            target = scratch / PurePosixPath(file.path).relative_to(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                size, digest = copy_plain(self.root / file.path, target)
            except NotPlainFile as exc:
                problems.append(f"{file.path}: {exc.reason}")
                continue
            if size != file.bytes or digest != file.sha256:
                problems.append(f"{file.path}: sha256 mismatch")
        if problems:
            shutil.rmtree(scratch, ignore_errors=True)
            raise BundleVerificationError(f"component {name} of the bundle at {self.root} changed after it was "
                                          "verified: " + "; ".join(problems))
        scratch.rename(folder)
        return folder

    def verified_bytes(self, name: str, rel: str) -> bytes:
        """The bytes of file `rel` of component `name`, from its verified copy."""
        return (self.verified_copy(name) / rel).read_bytes()

    def component(self, name: str):
        """The runtime object of component `name`, loaded once per bundle (ONNX sessions are costly)
        from its verified copy (`verified_copy`), with the components it reads beside it (a text
        predictor's shared embeddings: `uses_components`). A router or KNN estimator gets the bundle's
        sentence encoder attached."""
        if name not in self._loaded:
            entry = self.manifest.component(name)
            kind = component_kind(entry.kind, entry.config)
            folder = self.verified_copy(name)
            for other in getattr(kind.cls, "uses_components", lambda _folder: [])(folder):
                self.verified_copy(other)
            loaded = kind.load(folder)
            if hasattr(loaded, "encoder") and loaded.encoder is None and self.has_kind("sentence_encoder"):
                loaded.encoder = self.sentence_encoder()
            self._loaded[name] = loaded
        return self._loaded[name]

    def has_kind(self, kind: str) -> bool:
        return any(c.kind == kind for c in self.manifest.components)

    def _first_of_kind(self, kind: str, missing: str):
        component = next((c for c in self.manifest.components if c.kind == kind), None)
        if component is None:
            raise KeyError(f"bundle {self.manifest.name} has no {kind} component{missing}")
        return self.component(component.name)

    def sentence_encoder(self):
        """The ONNX sentence encoder the router and KNN embed prompts with (`SentenceEncoder`)."""
        return self._first_of_kind("sentence_encoder", " (written before encoders shipped in bundles: "
                                   "re-register it, or pass encoder= to predict)")

    def knn_estimator(self):
        return self.component("knn_estimator")

    def text_predictor(self, name: str):
        """A text predictor component (`routeforge.artifacts.deciding.text_predictor.TextPredictor`):
        `length_predictor`, `score_predictor` or `task_classifier`."""
        return self.component(name)

    def length_predictor(self):
        """The shared output-length bucket predictor."""
        return self.text_predictor("length_predictor")

    def score_predictor(self):
        """The shared quality-score bucket predictor."""
        return self.text_predictor("score_predictor")

    def task_classifier(self):
        return self.text_predictor("task_classifier")

    def predict_buckets(self, name: str, prompts: list[str], model: str, tasks: list[str | None] | None = None):
        """`name`'s prediction for `model`; unknown tasks are filled by the bundle's task classifier
        when it has one."""
        classifier = self.task_classifier() if self.has_kind("task_classifier") else None
        return self.text_predictor(name).predict(prompts, tasks, model=model, task_classifier=classifier)

    def route(self, prompts: list[str], lam: float = 0.0, *, budget_per_1k: float | None = None,
              max_share: dict[str, float] | None = None, min_quality: float | None = None,
              with_propensity: bool = False, rng: np.random.Generator | None = None,
              explore: float = 0.0) -> Routing:
        """Estimates for `prompts` and the model each goes to (argmax quality − λ·cost): by the router
        where the bundle has one (chosen by cross-validation), else by its KNN estimator. A target
        instead of λ (a cost per 1,000 requests, a most share per model, a quality floor) picks λ
        from the router's calibration table (`budget_setting`); `Routing.setting` says what to expect.
        With `rng` a router that has learned from outcomes routes by Thompson sampling, and with
        `explore` ε a share ε of prompts goes to a uniformly random model; `with_propensity` gives
        each choice's probability (`Routing.log_fields`, for the traffic log)."""
        import math

        import numpy as np
        from routeforge.artifacts.deciding.router import PROPENSITY_DRAWS, explore_mix, one_hot  # lazy: numpy
        from routeforge.artifacts.deciding.sentence_encoder import embed_for  # lazy: numpy on first use

        shares = (max_share or {}).items()
        for what, value in (("lam", lam), ("budget_per_1k", budget_per_1k), ("min_quality", min_quality),
                            ("explore", explore), *((f"max_share[{m}]", v) for m, v in shares)):
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value)):
                raise ValueError(f"{what}: {value!r} is not a finite number")
        if lam < 0 or (budget_per_1k is not None and budget_per_1k < 0) or any(not 0 <= v <= 1 for _, v in shares):
            raise ValueError("lam and budget_per_1k must not be negative, and each max_share is a share in [0, 1]")
        setting = None
        if budget_per_1k is not None or max_share is not None or min_quality is not None:
            setting = self.budget_setting(budget_per_1k=budget_per_1k, max_share=max_share, min_quality=min_quality)
        if setting is not None or self.has_kind("router"):
            router = self.router()
            x = embed_for(router, prompts)
            prediction = router.apply_recall(prompts, router.predict_embeddings(x))
            lams = setting.lams(prompts) if setting is not None else lam  # one λ, or two by prompt
            if rng is None and not explore and not with_propensity:
                return Routing(prediction, [prediction.models[i] for i in prediction.best_index(lams)], "router",
                               setting)
            choice = router.choose_embeddings(x, lams, rng, explore, PROPENSITY_DRAWS if with_propensity else 0,
                                              texts=prompts)
            return Routing(prediction, choice.models, "router", setting,
                           choice.propensity if with_propensity else None)
        knn = self.knn_estimator()
        prediction = knn.predict(prompts)
        served = prediction.best_index(lam, knn.prior)
        served, probabilities = explore_mix(served, one_hot(served, len(prediction.models)), explore, rng)
        return Routing(prediction, [prediction.models[i] for i in served], "knn_estimator", None,
                       probabilities[np.arange(len(served)), served] if with_propensity else None)

    def budget_table(self) -> dict[str, Any]:
        """The router's calibration table: per λ, the quality, cost per 1,000 requests and shares it
        gave on prompts it was not fitted on (`training.predictors.budget_calibration`)."""
        table = self.router().meta.get("budget") if self.has_kind("router") else None
        if not table:
            raise KeyError(f"bundle {self.manifest.name} has no budget calibration table (its router was trained "
                           "before routeforge recorded one, or it has no router: training.router.enabled)")
        return table

    def budget_setting(self, *, budget_per_1k: float | None = None, max_share: dict[str, float] | None = None,
                       min_quality: float | None = None):
        """The λ that meets the targets, with the figures to expect (`artifacts.deciding.budget.choose_setting`)."""
        from routeforge.artifacts.deciding.budget import choose_setting  # lazy: numpy on first use

        return choose_setting(self.budget_table(), budget_per_1k=budget_per_1k, max_share=max_share,
                              min_quality=min_quality)

    def router(self):
        """The router chosen by cross-validation (`routeforge.artifacts.deciding.router.Router`:
        `.predict(texts)` with `.models`, `.quality`, `.output_tokens`, `.cost` and `.best_model(lam)`).
        A bundle trained without router selection has none; `knn_estimator()` is always there."""
        return self._first_of_kind("router", " (training.router.enabled was off); use knn_estimator()")

    @property
    def routing_policies(self) -> list[str]:
        """Every routing policy in the bundle: learned (ONNX) and heuristic (JSON spec) alike."""
        return [c.name for c in self.manifest.components if c.kind == "routing_policy"]

    @property
    def recommended_policy(self) -> str | None:
        """The routing policy the training run's gate recommends (`training.policies.gate`), or None
        for a bundle without routing policies. The reason is in `routing_recommendation`."""
        return next((c.name for c in self.manifest.components if c.kind == "routing_policy"
                     and c.config.get("recommended")), None)

    @property
    def routing_recommendation(self) -> dict:
        """{recommended_policy, recommendation (why), objective} as the manifest records them."""
        for c in self.manifest.components:
            if c.kind == "routing_simulator":
                return {k: c.config[k] for k in ("recommended_policy", "recommendation", "objective") if k in c.config}
        return {}

    def routing_policy(self, name: str | None = None):
        """A routing policy by name (e.g. `policy--sac_qos_han`), or without a name the recommended
        one. A learned policy is an `artifacts.deciding.policy.RoutingPolicy` (`act(observation)`, with the
        observation built by its kind in `artifacts.deciding.policy_inputs`); a heuristic is an
        `artifacts.deciding.heuristics.HeuristicPolicy` (`route(request, instances)` on router telemetry)."""
        if name is None:
            name = self.recommended_policy
            if name is None:
                raise KeyError(f"bundle {self.manifest.name} recommends no routing policy "
                               f"(it has {self.routing_policies or 'none'})")
        return self.component(name)

    def simulator_spec(self) -> dict:
        """The simulated fleet the routing evaluation ran (`simulator.json`: instances and their fits,
        queue limits, the gate, per-traffic recommendations); KeyError for a bundle without one."""

        component = next((c for c in self.manifest.components if c.kind == "routing_simulator"), None)
        if component is None:
            raise KeyError(f"bundle {self.manifest.name} has no routing evaluation (routing_simulator): it was "
                           "trained without training.routing_evaluation")
        return json.loads(self.verified_bytes(component.name, "simulator.json"))

    def recommended_policy_for(self, traffic_stats: dict[str, float], objective: str = "goodput") -> dict:
        """The policy the training run found best for traffic like `traffic_stats` (any of
        `arrival_cv`, `prompt_mean`, `output_mean`, `load`, `prefix_sharing`) on `objective`: {policy, workload, load,
        distance, used} (`artifacts.deciding.recommendation.recommend`). A bundle whose evaluation predates the
        per-traffic table raises, naming what it has."""
        spec = self.simulator_spec()
        if not spec.get("recommendations"):
            raise KeyError(f"bundle {self.manifest.name} records no per-traffic recommendations (trained before "
                           f"they existed); its one recommendation is {self.recommended_policy}")
        out = recommend(spec["recommendations"], traffic_stats, objective)
        out["policy"] = f"policy--{out['policy']}"
        return out

    @property
    def tiers_with_latency(self) -> list[str]:
        return [c.config["tier"] for c in self.manifest.components if c.kind == "latency_heads"]

    def latency(self, tier: str):
        """The tier's `artifacts.deciding.latency.LatencyModel`: TPOT/TTFT/E2E from the state at dispatch."""
        for c in self.manifest.components:
            if c.kind == "latency_heads" and c.config.get("tier") == tier:
                return self.component(c.name)
        raise KeyError(f"bundle {self.manifest.name} has no latency heads for tier {tier!r} "
                       f"(has {self.tiers_with_latency})")


def load_bundle(ref: str | Path, dst: Path | None = None, tracking_uri: str | None = None,
                public_key: Path | str | bytes | None = None, allow_unsigned: bool = False) -> RouterBundle:
    """Load a bundle from a folder or `models:/<name>@<alias>`; verifies its signature and files
    before returning (`verify_bundle`), with the pinned key its signature names (`resolve_key`: the
    key or folder given, else $ROUTEFORGE_PUBLIC_KEY, else the keyring folders; never a key read
    from the store unless the user opted in to trust on first use)."""
    key = resolve_key(ref, public_key, tracking_uri, allow_unsigned)
    root, manifest = fetch_verified(ref, dst, tracking_uri, key, allow_unsigned)
    return RouterBundle(root=root, manifest=manifest)


