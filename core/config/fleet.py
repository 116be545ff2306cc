"""The whole fleet: one strict pydantic schema over every stage's settings, and `load_fleet`.

A fleet file names the candidate models (engine, weight source, prices), the hardware tiers, the
prompt datasets, and the settings of generation, scoring, training and registration. Every model is
strict (`extra="forbid"`), so a typo or a wrong type fails at load with the field's dotted path.
Strings may use ``${VAR}`` or ``${VAR:-default}``; path fields resolve by their type (see `base`).
``${ROUTEFORGE_STATE}`` unset is the state folder's default, `.state` in the working directory
(`artifacts.common.state_folder`): a fleet file copied anywhere writes its storage root and local registry
under the state folder of wherever it is run, not beside the file.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError, model_validator
from routeforge.artifacts.common.extensions import EXTENSIONS_VARIABLE
from routeforge.artifacts.common.state_folder import STATE_ENV, state_root
from routeforge.core.config.base import (
    CONFIG_DIR,
    ConfigError,
    ConfigPath,
    ModelRef,
    Name,
    StorageLocation,
    StoreUri,
    _Strict,
    did_you_mean,
    reachable_models,
)
from routeforge.core.config.data_columns import task_problems
from routeforge.core.config.data_rows import row_problems
from routeforge.core.config.datasets import Dataset, PromptSettings, SplitSettings, Templates
from routeforge.core.config.generation import GenerationSettings
from routeforge.core.config.models import ModelSpec, Sampling
from routeforge.core.config.scoring import ScoringSettings, code_isolation_warning, metric_says
from routeforge.core.config.tiers import Hardware, ProfilingSettings, Tier
from routeforge.core.config.training import TrainingSettings
from routeforge.core.kinds import DATASET_KINDS, ENGINES, SOURCE_KINDS, workloads_reading
from routeforge.core.pretrained import ENCODER_PACKAGE_REF
from routeforge.core.storage_root import StorageRoot

_ENV_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class RegistrySettings(_Strict):
    tracking_uri: StoreUri  # the MLflow tracking URI: `sqlite:///…` locally, `http://…` for an `mlflow server`
    experiment: str  # the MLflow experiment the runs are logged in
    model_name: Name  # a registered model name: plain, as model and hardware names are
    alias: str = "challenger"  # the alias each new version gets (the release gate moves `champion`)
    # where the experiment stores artifacts (a folder or URI; None: the tracking server's default)
    artifact_location: StoreUri | None = None
    # Ed25519 private key (PEM) that signs every bundle's manifest; `.pub` beside it is what router
    # services verify with. Unset: $ROUTEFORGE_SIGNING_KEY, else a key pair the pipeline creates
    # under <storage_root>/keys/ on first use (see `signing_key_path`).
    signing_key: ConfigPath | None = None
    # where people open the MLflow UI, for the run links in Dagster's metadata; unset: the tracking
    # server itself when it is one (http[s]://), else `make mlflow-ui`'s http://127.0.0.1:5000
    ui_url: str | None = None


class ReplayGate(_Strict):
    """Judge each challenger on logged traffic too (`artifacts.operating.replay`): the paired difference of its
    estimated mean outcome and the champion's on the requests in `logs` that carry an outcome and
    the serving decision's propensity. A challenger whose difference lies below −`tolerance` with
    its whole interval is held, whatever the frozen evaluation set says."""

    logs: str  # a traffic log file, or a folder of *.jsonl / *.jsonl.gz (local path or fsspec URI)
    method: Literal["dr", "snips", "ips"] = "dr"  # doubly robust, self-normalised or plain inverse propensity
    level: Literal[0.9, 0.95, 0.99] = 0.95  # the interval's confidence level
    tolerance: float = Field(default=0.0, ge=0)  # how far below the champion the interval may reach before holding
    min_requests: int = Field(default=200, ge=2)  # fewer usable logged requests: the replay is recorded, not applied
    lam: float = Field(default=0.0, ge=0)  # the λ both bundles route with in the replay


class ReleaseSettings(_Strict):
    """The release gate after each registration (`registry.release`): the challenger becomes
    `champion` only when no metric regresses beyond its tolerance against the champion on the frozen
    evaluation set, or, for the first version, when it clears every floor. Metrics: router_quality,
    gap_closed, task_classifier_top1, policy/<name>/simulator_qos (higher is better),
    latency/<tier>/{tpot_mae_ms, ttft_mae_ms, e2e_mape}, policy/<name>/simulator_e2e_mean_s (lower)."""

    enabled: bool = True  # gate each new version against the champion before it may be promoted
    tolerance: dict[str, float] = Field(default_factory=dict)  # metric -> largest allowed regression
    default_tolerance: float = Field(default=0.0, ge=0)  # for metrics not named in `tolerance`
    floors: dict[str, float] = Field(default_factory=dict)  # metric -> least value for a first champion
    # metrics a challenger may lack (or measure as NaN) without being held; every other metric the
    # champion has must be there, finite and within its tolerance. An entry ending in `/` names a prefix
    optional: list[str] = Field(default_factory=list)
    replay: ReplayGate | None = None  # also judge the challenger on logged traffic (off-policy)
    # an evaluation prompt routed to a model added by `bundle add-model` scores routeforge's own score
    # of the response the label file gave (`training.predictors.label_audit`), else 0; true credits
    # the model's own labels there instead (labels that lie consistently then pass the gate)
    trust_added_labels: bool = False

    @model_validator(mode="after")
    def _non_negative(self) -> ReleaseSettings:
        bad = sorted(k for k, v in self.tolerance.items() if v < 0)
        if bad:
            raise ValueError(f"tolerance: must be ≥ 0 ({bad})")
        return self


class WatchedLocation(_Strict):
    """A folder or fsspec URI whose new files (prompt sets, traffic logs) launch `jobs` (one run per
    partition of a partitioned job: `profile_tiers` re-reads each tier's traffic logs)."""

    name: str  # the sensor's name
    uri: StoreUri  # the folder or fsspec URI watched for new files
    # file name endings that count as new data
    suffixes: list[str] = Field(default_factory=lambda: [".jsonl", ".jsonl.gz", ".json", ".csv", ".parquet"])
    # the jobs launched when new files arrive there
    jobs: list[str] = Field(default_factory=lambda: ["build_prompts"], min_length=1)


class AutomationSettings(_Strict):
    """Dagster sensors (`pipelines/sensors.py`): new files under each watched location, and a change
    of this fleet file's content, each launch their named jobs; `retrain_what_is_stale` (declarative
    automation) then rebuilds whatever those runs made stale, and the prompt set re-reads its sources
    on `cron` (the weekly retraining; null: only when a sensor or a person asks)."""

    watch: list[WatchedLocation] = Field(default_factory=list)
    # jobs to launch when the fleet file itself changes (a sensor on its content)
    on_fleet_change: list[str] = Field(default_factory=lambda: ["build_prompts"])
    # cron schedule of the weekly retraining run (Dagster schedule, in the daemon's time zone)
    cron: str | None = "0 3 * * 1"
    minimum_interval_s: int = Field(default=60, ge=1)  # the sensors' shortest time between two evaluations, in seconds


class ExecutionSettings(_Strict):
    """Where the steps of a job run execute (`pipelines/executors.py`):

    - `in_process`: in the run's own process (one machine; the least overhead; the default);
    - `multiprocess`: one process per step, up to `max_concurrent` at once;
    - `ray`: one Ray job per step on a Ray cluster (`dagster-ray`'s executor, extra `deploy`).

    Every executor but `in_process` needs a persistent Dagster instance ($DAGSTER_HOME, PostgreSQL
    across machines) and, across machines, an object-store `storage_root` that every worker reaches."""

    # where steps run: `in_process`, `multiprocess` (one process per step) or `ray` (one Ray job per step)
    executor: Literal["in_process", "multiprocess", "ray"] = "in_process"
    # multiprocess: steps at once (default: the CPU count); Ray schedules by `step_cpus` instead
    max_concurrent: int | None = Field(default=None, ge=1)
    # the Ray job server (http://<head>:8265); unset: $RAY_ADDRESS
    ray_address: str | None = None
    # CPUs and GPUs each step asks of Ray (Kubernetes: deploy/helm/values.yaml); a step of the
    # `generation` pool (responses, tier_profiles) asks `accelerator_gpus`, the others none
    step_cpus: float = Field(default=1.0, gt=0)
    # GPUs each step that holds an accelerator asks of Ray (executor `ray`; 0 on CPU)
    accelerator_gpus: float = Field(default=0.0, ge=0)
    # environment variables forwarded to every step (names, values taken from the launching
    # process; `NAME=value` sets one); the fleet file, mirror, credentials and stores by default
    step_env: list[str] = Field(default_factory=lambda: [
        "ROUTEFORGE_CONFIG", "ROUTEFORGE_MIRROR", "ROUTEFORGE_SIGNING_KEY", "ROUTEFORGE_DATA", "ROUTEFORGE_STATE",
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
        "MLFLOW_TRACKING_URI", "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_HOME", "TOKENIZERS_PARALLELISM",
        "DAGSTER_HOME", "DAGSTER_POSTGRES_URL", "DAGSTER_COMPUTE_LOG_BUCKET", "PATH"])


# Dagster's two kinds of owner: an email address or a team
Owner = Annotated[str, Field(pattern=r"^(team:[A-Za-z0-9_-]+|[^@\s]+@[^@\s]+\.[^@\s]+)$")]


class FleetConfig(_Strict):
    name: Name  # the fleet's name: names its storage folder, its Dagster code location and its bundle
    # a local folder or an fsspec URI (s3://bucket/prefix, gs://..., file://...): every stage file,
    # cache shard, quarantine file, report and component folder goes there (core.storage_root)
    storage_root: StorageLocation
    # fsspec options for a URI root, e.g. {endpoint_url: ..., key: ..., secret: ...} for S3; unset:
    # the filesystem's own defaults (AWS_* environment variables, instance credentials)
    storage_options: dict[str, Any] = Field(default_factory=dict)
    # sentence encoder of the KNN estimator, the router and the routing table: a hub id, a local folder or `package:gt-
    # all-minilm-l6-v2`
    encoder: ModelRef = ENCODER_PACKAGE_REF
    models: list[ModelSpec] = Field(min_length=1)  # the candidate models the router chooses between
    # the machines tiers run on (accelerator, count, price per hour)
    hardware: list[Hardware] = Field(default_factory=list)
    tiers: list[Tier] = Field(default_factory=list)
    datasets: list[Dataset] = Field(min_length=1)
    prompts: PromptSettings = PromptSettings()
    templates: Templates = Templates()
    # how prompts are split into train and test (seeded by hash, or as the files say)
    split: SplitSettings = SplitSettings()
    # how responses are generated: sampling, batching, sharding and the response filters
    generation: GenerationSettings = GenerationSettings()
    scoring: ScoringSettings
    # the predictors, the router selection and the routing-policy evaluation
    training: TrainingSettings = TrainingSettings()
    # latency profiling of every tier: the batch grid, the QPS sweep and the fits
    profiling: ProfilingSettings = ProfilingSettings()
    registry: RegistrySettings  # the MLflow registry the bundle is registered in
    release: ReleaseSettings = ReleaseSettings()
    automation: AutomationSettings = AutomationSettings()
    execution: ExecutionSettings = ExecutionSettings()
    # who answers for the assets, shown in the Dagster UI and searchable there: by asset group
    # (labels, latency, training, evaluation, registry), "*" for every group not named; each
    # owner an email address or "team:<name>", as Dagster takes them
    owners: dict[str, list[Owner]] = Field(default_factory=dict)

    def min_prompts_per_split(self) -> dict[str, int]:
        """The fewest prompts each split needs before training: in `train`, the KNN's neighbours and
        the router's cross-validation folds; in `test`, 2 (one prompt is not a score). A smaller fleet
        used to end in an assertion inside FAISS; `config validate` and the routing table say this."""
        return {"train": max(self.training.knn.k, self.training.router.folds), "test": 2}

    def routing_traffic_logs(self) -> str | None:
        """The production logs the routing evaluation replays as its "traffic" workload: its own
        `traffic_logs`, else the first traffic_log dataset's path; None when replay is off or none is set."""
        settings = self.training.routing_evaluation
        listed = set(settings.workloads) & set(workloads_reading("traffic_logs"))
        if not settings.replay_traffic and not listed:
            return None
        if settings.traffic_logs:
            return settings.traffic_logs
        return next((str(d.path) for d in self.datasets if getattr(d, "kind", None) == "traffic_log"), None)

    def owners_of(self, group: str | None) -> list[str]:
        """The owners of an asset in `group`: the group's own, else those under "*"."""
        return list(self.owners.get(group or "", self.owners.get("*", [])))

    @model_validator(mode="after")
    def _cross_references(self) -> FleetConfig:
        names = [m.name for m in self.models]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"models: duplicate names {dupes}")
        hw = {h.name for h in self.hardware}
        for i, tier in enumerate(self.tiers):
            if tier.model not in names:
                raise ValueError(f"tiers.{i}.model: unknown model {tier.model!r}{did_you_mean(tier.model, names)} "
                                 f"(models: {', '.join(names)})")
            if tier.hardware not in hw:
                raise ValueError(f"tiers.{i}.hardware: unknown hardware {tier.hardware!r}"
                                 f"{did_you_mean(tier.hardware, hw)} (hardware: {', '.join(sorted(hw))})")
        datasets = {d.name: d for d in self.datasets}
        if len(datasets) != len(self.datasets):
            raise ValueError("datasets: names must be unique")
        for i, model in enumerate(self.models):
            if SOURCE_KINDS.entry(model.source.kind).metadata.get("rows_of_dataset"):
                ds = datasets.get(model.source.dataset)
                if ds is None:
                    raise ValueError(f"models.{i}.source.dataset: no dataset named {model.source.dataset!r}"
                                     f"{did_you_mean(model.source.dataset, datasets)}")
                if not DATASET_KINDS.entry(ds.kind).metadata.get("responses") and model.source.file is None:
                    raise ValueError(
                        f"models.{i}.source.file: dataset {ds.name!r} ({ds.kind}) holds no responses; "
                        "name a response file"
                    )
        for metric in sorted(m for m in self.scoring.metrics if metric_says(m, "reads_table_labels")):
            generating = [m.name for m in self.models if ENGINES.entry(m.engine).metadata.get("generates", True)]
            if generating:
                raise ValueError(f"scoring.metric: {metric} reads the labels of imported response tables, but "
                                 f"{generating} generate (engine table_import for every model)")
        if judged := sorted(m for m in self.scoring.metrics if metric_says(m, "needs_judge")):
            judge = self.scoring.judge
            if judge is None:
                raise ValueError(f"scoring.judge: {', '.join(judged)} is used but no judge model is configured")
            if judge.model.name in names:
                raise ValueError(f"scoring.judge.model.name: {judge.model.name!r} is a candidate; the judge "
                                 "must be outside the candidate pool (002 §4.2)")
            if not ENGINES.entry(judge.model.engine).metadata.get("generates", True):
                raise ValueError(f"scoring.judge.model.engine: a judge must generate (not {judge.model.engine})")
        replayed = [k for k in self.training.routing_evaluation.workloads if k in workloads_reading("traffic_logs")]
        if replayed and self.routing_traffic_logs() is None:
            raise ValueError(f"training.routing_evaluation.traffic_logs: the {replayed[0]!r} workload needs traffic "
                             "logs (set traffic_logs, or add a traffic_log dataset)")
        jobs = self.job_names()
        named = [(f"automation.watch[{w.name}].jobs", w.jobs) for w in self.automation.watch]
        for field, wanted in [*named, ("automation.on_fleet_change", self.automation.on_fleet_change)]:
            unknown = [j for j in wanted if j not in jobs]
            if unknown:
                hint = ("; retrain_fleet is gone: launch build_prompts and the assets that go stale are rebuilt "
                        "by the retrain_what_is_stale sensor" if "retrain_fleet" in unknown else
                        "; profile_tiers exists only where a tier has a `profile` to measure" if "profile_tiers"
                        in unknown else "")
                raise ValueError(f"{field}: unknown job(s) {unknown} (this fleet's jobs: {jobs})"
                                 + did_you_mean(unknown[0], jobs) + hint)
        return self

    def warnings(self) -> list[str]:
        """What validates but will not do what a user likely means, or runs less safely than it may: said
        by `config validate` and at the start of every run. Generated code run without isolation
        (`code_isolation_warning`); a model without a tier, routed to by quality while the simulator,
        the routing policies and the dispatch call know only the models that have instances; lines of
        a data file the run will quarantine; a `per_task` key no file confirms where some dataset's
        tasks are known only at run time; a policy setting under its old key (`ddqn`, `sac`, `ppo`)."""
        out = [w for w in [code_isolation_warning(self.scoring)] if w]
        out += [f"note: {moved} (the old key is still read)"
                for moved in self.training.routing_evaluation.moved_keys()]
        if self.tiers:
            served = {t.model for t in self.tiers}
            untiered = [m for m in self.model_names if m not in served]
            if untiered:
                out.append(f"warning: models {untiered} have no tier: the router may pick them, but the latency "
                           f"heads, the routing simulator, its policies and the dispatch call cover only "
                           f"{sorted(served)} (add a tier per model, or leave them out)")

        out += row_problems(self)[1]  # lines the run will quarantine
        if self.scoring.per_task or self.templates.per_task:  # keys no file confirms (errors: `files.load_checked`)

            out += task_problems(self)[1]
        return out

    def job_names(self) -> list[str]:
        """The jobs the fleet's code location defines (`pipelines/definitions.py`, which a test holds to
        this list): what sensors may launch. `profile_tiers` only where some tier is profiled."""
        return ["build_prompts", "generate_and_score", "build_routing_table", "train_and_register",
                *(["profile_tiers"] if any(t.profile is not None for t in self.tiers) else [])]

    def model(self, name: str) -> ModelSpec:
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(f"no model named {name!r} in fleet {self.name!r}")

    def dataset(self, name: str) -> Dataset:
        for d in self.datasets:
            if d.name == name:
                return d
        raise KeyError(f"no dataset named {name!r} in fleet {self.name!r}")

    @property
    def model_names(self) -> list[str]:
        return [m.name for m in self.models]

    def sampling(self, model: str) -> Sampling:
        """The resolved sampling settings of one model."""
        return self.generation.sampling.merged(self.model(model).sampling)

    def signing_key_path(self) -> tuple[Path, bool]:
        """(private key path, whether the pipeline may create it): `registry.signing_key`, else
        $ROUTEFORGE_SIGNING_KEY, else `<storage_root>/keys/bundle-signing.key` (created when missing).
        A configured key must exist: a typo must not silently sign with a fresh, unknown key."""
        if self.registry.signing_key is not None:
            return self.registry.signing_key, False
        if os.environ.get("ROUTEFORGE_SIGNING_KEY"):
            return Path(os.environ["ROUTEFORGE_SIGNING_KEY"]).expanduser().resolve(), False
        if not self.storage.is_local:
            # a private key belongs in a secret store, not in a shared bucket nor a temporary mirror
            raise ConfigError(f"registry.signing_key: required when storage_root is an object store "
                              f"({self.storage_root}); set it, or $ROUTEFORGE_SIGNING_KEY, to the bundle-signing "
                              f"private key (`routeforge keys generate` makes a pair)")
        return Path(self.storage_root) / "keys" / "bundle-signing.key", True

    @property
    def storage(self) -> StorageRoot:
        """`storage_root` with its options: `.path(...)` under the root, `.mirror` for library files."""
        return StorageRoot(str(self.storage_root), dict(self.storage_options))

    def tier_of(self, model: str) -> Tier | None:
        """The first tier that deploys `model` (where its engine runs and with which parallelism)."""
        return next((t for t in self.tiers if t.model == model), None)


MAX_FLEET_BYTES = 1 << 20  # the shipped fleets are under 10 KB
MAX_YAML_NODES = 100_000  # values once every alias is expanded; the shipped fleets have under 2,000


def _check_expansion(text: str, path: Path) -> None:
    """Refuse a YAML file whose aliases expand past `MAX_YAML_NODES` values, before anything expands
    them: nine nested aliases of nine make 9⁹ nodes, and expanding `${VAR}`s walked each (config
    validate hung past 90 s at 730 MB). The node graph is composed (an alias is a shared node, not a
    copy) and its expanded size counted once per node, so the check itself is cheap."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    sizes: dict[int, int] = {}

    def size(node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        sizes[id(node)] = MAX_YAML_NODES + 1  # a node that contains itself expands without end
        if isinstance(node, yaml.MappingNode):
            total = 1 + sum(size(k) + size(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(v) for v in node.value)
        else:
            total = 1
        sizes[id(node)] = min(total, MAX_YAML_NODES + 1)
        return sizes[id(node)]

    if root is not None and size(root) > MAX_YAML_NODES:
        raise ConfigError(f"fleet config {path}: its YAML aliases (*name) expand to more than {MAX_YAML_NODES:,} "
                          "values; write the repeated settings out")


def _expand_env(value: Any, where: str = "") -> Any:
    """`${VAR}` and `${VAR:-default}` from the environment. An unset `${VAR}` without a default is an
    error naming the variable and the field (it silently became "": `storage_root: ${UNSET}/demo`
    validated as `/demo`)."""
    if isinstance(value, str):
        def substitute(m) -> str:
            if m.group(1) in os.environ:
                return os.environ[m.group(1)]
            if m.group(1) == STATE_ENV and m.group(2) is None:
                return str(state_root())  # the state folder's own default: ./.state where the run starts
            if m.group(2) is None:
                raise ConfigError(f"{where or '<root>'}: ${{{m.group(1)}}} is not set and has no default "
                                  f"(set it, or write ${{{m.group(1)}:-default}})")
            return m.group(2)

        return _ENV_PATTERN.sub(substitute, value)
    if isinstance(value, dict):
        return {k: _expand_env(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env(v, f"{where}.{i}") for i, v in enumerate(value)]
    return value


def load_fleet(path: str | os.PathLike[str]) -> FleetConfig:
    """Read, validate and resolve a fleet file; raises ConfigError naming the bad field.

    Parsed once per process: the driver, the definitions, every asset's `FleetResource` and the CLI ask
    for the same file, and get the same (frozen) `FleetConfig` while what the parse reads is unchanged:
    the file, the variables its `${VAR}`s name, the extensions that register kinds, and the working
    directory (the state folder's default). Not the whole environment: Dagster sets `DAGSTER_HOME`
    around a run, and a parse keyed by it was made again inside the run."""
    path = Path(path).resolve()
    if path.exists() and not path.is_file():
        raise ConfigError(f"fleet config {path}: not a regular file")
    try:
        size = path.stat().st_size
        if size > MAX_FLEET_BYTES:
            raise ConfigError(f"fleet config {path}: {size:,} bytes, more than a fleet file may hold "
                              f"({MAX_FLEET_BYTES:,}); data belongs in the files it names")
        text = path.read_text()
    except FileNotFoundError as exc:
        raise ConfigError(f"fleet config {path} does not exist") from exc
    names = sorted({m.group(1) for m in _ENV_PATTERN.finditer(text)} | {STATE_ENV, EXTENSIONS_VARIABLE})
    return _parsed(path, text, (tuple((n, os.environ.get(n)) for n in names), os.getcwd()))


@functools.lru_cache(maxsize=16)
def _parsed(path: Path, text: str, _reads: tuple) -> FleetConfig:
    """`load_fleet`'s work, keyed by what its result depends on (`load_fleet` says what)."""
    try:
        _check_expansion(text, path)
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        what = " ".join(str(getattr(exc, "problem", None) or exc).split())
        context = getattr(exc, "context", None)
        raise ConfigError(f"fleet config {path}{where}: not valid YAML: {what}"
                          + (f" ({' '.join(str(context).split())})" if context else "")) from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"fleet config {path}: top level must be a mapping")
    try:
        expanded = _expand_env(raw)
    except ConfigError as exc:
        raise ConfigError(f"fleet config {path}: {exc}") from None
    try:
        return FleetConfig.model_validate(expanded, context={CONFIG_DIR: path.parent})
    except ValidationError as exc:
        # a whole-file check names its own field in its message: no location before it
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) + ': ' if err['loc'] else ''}"
            f"{err['msg'].removeprefix('Value error, ')}{_did_you_mean(err)}"
            for err in exc.errors()
        )
        raise ConfigError(f"fleet config {path}: {problems}") from exc


@functools.cache
def _config_field_names() -> tuple[str, ...]:
    """Every field name (and alias) of the fleet file's models: what an unknown key is compared with."""
    return tuple(sorted({n for model in reachable_models(FleetConfig).values() for name, field in
                         model.model_fields.items() for n in (name, field.alias) if n}))


def _did_you_mean(err: dict) -> str:
    """' (did you mean 'x'?)' for a mistyped key or choice, when one close name exists."""
    if err["type"] == "extra_forbidden" and err["loc"]:
        return did_you_mean(str(err["loc"][-1]), _config_field_names())
    if err["type"] in ("literal_error", "enum") and isinstance(err.get("input"), str):
        return did_you_mean(err["input"], re.findall(r"'([^']*)'", str((err.get("ctx") or {}).get("expected", ""))))
    return ""
