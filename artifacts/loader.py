"""The runtime loader: from a folder or an MLflow URI to a verified, ready-to-use router bundle.

Nothing is returned before the manifest validates against the JSON Schema, its schema version is
one this loader reads, and every listed file matches its sha256 (no file missing, none unlisted).

Verify first, from the bytes verified (`verified_manifest`): `manifest.json` and `manifest.sig` are
each read once, as plain files (no link, no special file: `artifacts.plain_files`); the signature is
checked on those bytes before anything else is done with the bundle, and the manifest is parsed from
the same bytes. Every component name is a plain name and every file path stays inside its
component's folder. A component is hashed again when it is first loaded (`RouterBundle.component`),
so a file changed after verification is refused, not used.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING, Any

from routeforge.artifacts import temporary
from routeforge.artifacts.components import component_kind
from routeforge.artifacts.keyring import PUBLIC_KEY_ENV, Keyring, load_keyring, user_keyring
from routeforge.artifacts.manifest import MANIFEST_FILE, MANIFEST_SCHEMA_VERSION, Manifest
from routeforge.artifacts.plain_files import NotPlainFile, copy_plain, read_plain, sha256_plain, walk_plain
from routeforge.artifacts.registry import download_bundle, is_remote_uri
from routeforge.artifacts.signing import SIGNATURE_FILE, signature_problem_of

if TYPE_CHECKING:  # numpy is imported where routing needs it: `bundle verify` stays light
    import numpy as np

SUPPORTED_MAJOR, SUPPORTED_MINOR = MANIFEST_SCHEMA_VERSION.split(".")


def no_key_message() -> str:
    """Why a bundle is refused when no key is pinned, and every way to pin one (never the store's)."""
    return (f"no pinned public key to check its signature with: pass public_key= (--public-key), set "
            f"${PUBLIC_KEY_ENV}, pin the signer's key (`routeforge keys pin KEY.pub`, into {user_keyring()}), or "
            "opt out explicitly with allow_unsigned=True (--insecure-skip-signature)")


class BundleVerificationError(Exception):
    """The bundle is not what its manifest says; the message names every offending file."""


MAX_MANIFEST_BYTES = 16 << 20  # a manifest lists files; no real one comes near this
MAX_SIGNATURE_BYTES = 4096
COMPONENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+=-]*")


def _schema() -> dict:
    return json.loads(resources.files("routeforge.artifacts").joinpath("manifest.schema.json").read_text())


def read_manifest(root: Path) -> Manifest:
    """The manifest of the bundle at `root`, read once as a plain file and validated (no signature
    check: `verified_manifest` for that)."""
    return parse_manifest(_manifest_bytes(Path(root)), Path(root) / MANIFEST_FILE)


def _manifest_bytes(root: Path) -> bytes:
    path = root / MANIFEST_FILE
    try:
        return read_plain(path, MAX_MANIFEST_BYTES)
    except NotPlainFile as exc:
        if not root.exists():
            raise BundleVerificationError(f"{root}: no such folder") from None
        if exc.missing:
            raise BundleVerificationError(f"{root}: no {MANIFEST_FILE}; not a routeforge bundle") from None
        raise BundleVerificationError(str(exc)) from None


SCHEMA_VERSION = re.compile(r"(0|[1-9][0-9]{0,8})\.(0|[1-9][0-9]{0,8})", re.ASCII)


def parse_schema_version(version) -> tuple[int, int] | None:
    """(major, minor) of a `<major>.<minor>` schema version in canonical ASCII decimal ("1.1"; not
    "01.1", "1.1.0" nor other scripts' digits), else None. The TypeScript runtime's
    `parseSchemaVersion` is held to the same golden cases (tests/artifacts/schema_versions.json)."""
    match = SCHEMA_VERSION.fullmatch(version) if isinstance(version, str) else None
    return (int(match[1]), int(match[2])) if match else None


def parse_manifest(data: bytes, path: Path) -> Manifest:
    """A manifest from its bytes: JSON, a schema version this loader reads, the JSON Schema."""
    import jsonschema

    try:
        raw = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise BundleVerificationError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise BundleVerificationError(f"{path}: a JSON object is expected")
    version = raw.get("schema_version")
    reads = f"{SUPPORTED_MAJOR}.0 to {MANIFEST_SCHEMA_VERSION}"
    parsed = parse_schema_version(version)
    if parsed is None:
        raise BundleVerificationError(f"{path}: schema_version {version!r} is not a version this loader reads "
                                      f"({reads})")
    if parsed[0] != int(SUPPORTED_MAJOR) or parsed[1] > int(SUPPORTED_MINOR):
        # a newer minor may carry signed claims this loader cannot honour: upgrade, never ignore them
        raise BundleVerificationError(
            f"{path}: schema_version {version} is not readable by this loader (reads {reads}; upgrade routeforge)"
        )
    try:
        jsonschema.validate(raw, _schema())
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "<root>"
        raise BundleVerificationError(f"{path}: field {where}: {exc.message}") from exc
    return Manifest.from_dict(raw)


def confinement_problems(manifest: Manifest) -> list[str]:
    """Every component name that is not a plain name, and every file path that could leave its
    component's folder (absolute, `..`, or outside `<component>/`)."""
    problems = []
    for component in manifest.components:
        name = component.name
        if not COMPONENT_NAME.fullmatch(name) or name in (".", ".."):
            problems.append(f"component {name!r}: not a plain name (letters, digits and _ . @ + = -)")
            continue
        for entry in component.files:
            why = _unsafe_path(entry.path)
            if why is None and PurePosixPath(entry.path).parts[0] != name:
                why = f"outside its component's folder {name}/"
            if why is not None:
                problems.append(f"{entry.path}: {why}")
    return problems


def verified_manifest(root: Path, public_key: Path | str | bytes | None = None,
                      allow_unsigned: bool = False) -> Manifest:
    """The bundle's manifest, from one read of `manifest.json`, after its signature was checked on
    those very bytes (one read of `manifest.sig`) and every path it names was found confined. Nothing
    else of the bundle is opened, linked or removed before this returns."""
    root = Path(root)
    data = _manifest_bytes(root)
    key = None if allow_unsigned and not named_key(public_key) else trusted_key(public_key)
    if key is None and not allow_unsigned:
        raise BundleVerificationError(f"bundle at {root} refused: {no_key_message()}")
    if key is None:
        print(f"routeforge: WARNING: the signature of the bundle at {root} was NOT verified "
              "(allow_unsigned / --insecure-skip-signature)", file=sys.stderr)
    else:
        try:
            signature = read_plain(root / SIGNATURE_FILE, MAX_SIGNATURE_BYTES)
        except NotPlainFile as exc:
            if not exc.missing:
                raise BundleVerificationError(f"bundle at {root} refused: {exc}") from None
            signature = None  # said by signature_problem_of: unsigned
        try:
            problem = signature_problem_of(data, signature, key)
        except ValueError as exc:
            raise BundleVerificationError(f"public key: {exc}") from exc
        if problem is not None:
            raise BundleVerificationError(f"bundle at {root} refused: {problem}")
    manifest = parse_manifest(data, root / MANIFEST_FILE)
    unsafe = confinement_problems(manifest)
    if unsafe:
        raise BundleVerificationError(f"bundle at {root} refused: " + "; ".join(unsafe))
    return manifest


def _unsafe_path(rel: str) -> str | None:
    """Why a manifest path could reach outside the bundle folder, or None."""
    parts = PurePosixPath(rel).parts
    if rel.startswith("/") or PureWindowsPath(rel).drive or "\\" in rel:
        return "absolute or not a POSIX relative path"
    if ".." in parts or not parts:
        return "leaves the bundle folder"
    return None


def trusted_key(public_key: Path | str | bytes | Keyring | None) -> Keyring | None:
    """The pinned keys to verify with (`keyring.load_keyring`: the key or folder given, else
    $ROUTEFORGE_PUBLIC_KEY, else the keyring folders), or None when none is pinned. A key given that
    is not a key is an error naming it."""
    try:
        keyring = load_keyring(public_key)
    except ValueError as exc:
        raise BundleVerificationError(f"public key: {exc}") from None
    return keyring or None


def named_key(public_key) -> bool:
    """Whether the caller named a key (given, or `$ROUTEFORGE_PUBLIC_KEY`): opting out of signatures
    skips the keyring folders' keys, never a key named explicitly."""
    return public_key is not None or bool(os.environ.get(PUBLIC_KEY_ENV))


def signer_id(root: Path) -> str | None:
    """The key id `manifest.sig` names (after `verified_manifest` checked it: the pinned key's)."""
    try:
        doc = json.loads(read_plain(Path(root) / SIGNATURE_FILE, MAX_SIGNATURE_BYTES))
    except (NotPlainFile, ValueError):
        return None
    kid = doc.get("key_id") if isinstance(doc, dict) else None
    return kid if isinstance(kid, str) else None


def verify_bundle(root: Path, public_key: Path | str | bytes | None = None, allow_unsigned: bool = False) -> Manifest:
    """Check the signature and every checksum; raise naming each problem.

    First `verified_manifest`: the manifest and its signature read once each, the signature checked
    on those bytes by the trusted key's owner (`public_key`, a PEM path or PEM bytes, else
    $ROUTEFORGE_PUBLIC_KEY), every component name plain and every path confined to its component's
    folder. An unsigned bundle, one signed by another key and one whose files and checksums were
    rewritten together are refused, naming the reason. Without a trusted key the bundle is refused
    too, unless the caller opts out with `allow_unsigned=True`, which is said on standard error (a
    signature proves who made the bundle; checksums alone only that it is whole). Then the folder
    holds plain files and folders only (no symbolic link, device, pipe or socket), each listed file
    hashed through the descriptor that was checked, and nothing unlisted."""
    root = Path(root)
    manifest = verified_manifest(root, public_key, allow_unsigned)
    present, odd = walk_plain(root)
    if odd:
        raise BundleVerificationError(f"bundle at {root} refused: " + "; ".join(odd))
    problems = [p for comp in manifest.components for p in component_problems(root, comp)]
    listed = listed_paths(manifest)
    problems += [f"{rel}: not listed in the manifest" for rel in present
                 if rel not in (MANIFEST_FILE, SIGNATURE_FILE) and rel not in listed]
    if problems:
        raise BundleVerificationError(f"bundle at {root} failed verification: " + "; ".join(problems))
    return manifest


def listed_paths(manifest: Manifest) -> set[str]:
    """Every file path the manifest lists (its components' files)."""
    return {entry.path for component in manifest.components for entry in component.files}


def component_problems(root: Path, component) -> list[str]:
    """Each file of `component` under `root` that is missing, not a plain file, or not what the
    manifest says (size and sha256, read through one descriptor)."""
    problems = []
    for entry in component.files:
        try:
            size, digest = sha256_plain(Path(root) / entry.path)
        except NotPlainFile as exc:
            problems.append(f"{entry.path}: {exc.reason}")
            continue
        if size != entry.bytes or digest != entry.sha256:
            problems.append(f"{entry.path}: sha256 mismatch")
    return problems


def fetch(ref: str, dst: Path | None = None, tracking_uri: str | None = None, public_key=None) -> Path:
    """A local folder for `ref`: a folder as it is; a `models:/` URI without `dst` through the local
    bundle cache (`artifacts.bundle_cache`: a registry version is downloaded once); any other MLflow
    URI, or one with `dst`, downloaded there (a fresh temporary folder without `dst`). With
    `public_key`, a download's signature is checked before its shared components are fetched."""
    if not is_remote_uri(ref):
        return Path(ref)
    if dst is None and ref.startswith("models:/"):
        from routeforge.artifacts.bundle_cache import cached_download

        return cached_download(ref, tracking_uri, public_key)
    return download_bundle(ref, dst, tracking_uri, public_key)


@dataclass(frozen=True)
class Routing:
    """What `RouterBundle.route` decided: the estimates (`.models`, `.quality`, `.output_tokens`,
    `.cost`), the model chosen per prompt, and which estimator made them."""

    prediction: Any
    choice: list[str]
    estimator: str
    setting: Any = None  # the `artifacts.budget.Setting` a target picked λ by, when one was given
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
    its kind (`routeforge.artifacts.components`), once; the typed accessors below are shorthands."""

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
        """A text predictor component (`routeforge.artifacts.text_predictor.TextPredictor`):
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
        from routeforge.artifacts.router import PROPENSITY_DRAWS, explore_mix, one_hot
        from routeforge.artifacts.sentence_encoder import embed_for

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
        """The λ that meets the targets, with the figures to expect (`artifacts.budget.choose_setting`)."""
        from routeforge.artifacts.budget import choose_setting

        return choose_setting(self.budget_table(), budget_per_1k=budget_per_1k, max_share=max_share,
                              min_quality=min_quality)

    def router(self):
        """The router chosen by cross-validation (`routeforge.artifacts.router.Router`:
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
        one. A learned policy is an `artifacts.policy.RoutingPolicy` (`act(observation)`, with the
        observation built by its `artifacts.policy.observation_*` function); a heuristic is an
        `artifacts.heuristics.HeuristicPolicy` (`route(request, instances)` on router telemetry)."""
        if name is None:
            name = self.recommended_policy
            if name is None:
                raise KeyError(f"bundle {self.manifest.name} recommends no routing policy "
                               f"(it has {self.routing_policies or 'none'})")
        return self.component(name)

    def simulator_spec(self) -> dict:
        """The simulated fleet the routing evaluation ran (`simulator.json`: instances and their fits,
        queue limits, the gate, per-traffic recommendations); KeyError for a bundle without one."""
        import json

        component = next((c for c in self.manifest.components if c.kind == "routing_simulator"), None)
        if component is None:
            raise KeyError(f"bundle {self.manifest.name} has no routing evaluation (routing_simulator): it was "
                           "trained without training.routing_evaluation")
        return json.loads(self.verified_bytes(component.name, "simulator.json"))

    def recommended_policy_for(self, traffic_stats: dict[str, float], objective: str = "goodput") -> dict:
        """The policy the training run found best for traffic like `traffic_stats` (any of
        `arrival_cv`, `prompt_mean`, `output_mean`, `load`, `prefix_sharing`) on `objective`: {policy, workload, load,
        distance, used} (`artifacts.recommendation.recommend`). A bundle whose evaluation predates the
        per-traffic table raises, naming what it has."""
        from routeforge.artifacts.recommendation import recommend

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
        """The tier's `artifacts.latency.LatencyModel`: TPOT/TTFT/E2E from the state at dispatch."""
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


def fetch_verified(ref: str | Path, dst: Path | None, tracking_uri: str | None, key,
                   allow_unsigned: bool = False) -> tuple[Path, Manifest]:
    """`fetch` then `verify_bundle`; a cached copy of a `models:/` bundle that fails is dropped from the
    cache and downloaded once more before the failure stands (a damaged entry never fails forever)."""
    root = fetch(str(ref), dst, tracking_uri, key)
    try:
        return root, verify_bundle(root, key, allow_unsigned)
    except BundleVerificationError:
        if dst is not None or not str(ref).startswith("models:/"):  # only a cached copy is fetched again
            raise
        from routeforge.artifacts.bundle_cache import BundleCache, cached_download

        BundleCache().forget(root)  # a cached copy damaged since: downloaded again, then verified again
        root = cached_download(str(ref), tracking_uri, key, fresh=True)
        return root, verify_bundle(root, key, allow_unsigned)


def resolve_key(ref: str | Path, public_key: Path | str | bytes | Keyring | None = None,
                tracking_uri: str | None = None, allow_unsigned: bool = False) -> Keyring | None:
    """The pinned keys a bundle at `ref` is verified with (`trusted_key`); None when none is pinned.
    The registry's recorded key is never trusted by itself: only with nothing pinned, for a
    `models:/` reference, and with $ROUTEFORGE_TRUST_ON_FIRST_USE=1 is it pinned (said on stderr),
    as SSH's known-hosts pins a host's first key."""
    from routeforge.artifacts.keyring import pin, trust_on_first_use_allowed

    if allow_unsigned and not named_key(public_key):
        return None  # opted out: said by `verified_manifest`
    key = trusted_key(public_key)
    if key is None and str(ref).startswith("models:/") and trust_on_first_use_allowed():
        from routeforge.artifacts.registry import recorded_public_key

        pem = recorded_public_key(str(ref), tracking_uri)
        if pem is not None:
            kid, path, _ = pin(pem)
            print(f"routeforge: pinned key {kid} from the registry's record for {ref} into {path} (trust on first "
                  f"use, $ROUTEFORGE_TRUST_ON_FIRST_USE=1): compare {kid} with the signer's `routeforge keys list`",
                  file=sys.stderr)
            key = trusted_key(None)
    return key
