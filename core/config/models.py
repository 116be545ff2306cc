"""Candidate models: where weights come from, which engine runs them, sampling and prices."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator
from routeforge.core.config.base import ConfigPath, ModelRef, Name, OneOf, _Strict
from routeforge.core.kinds import ENGINES
from routeforge.core.pretrained import ENCODER_PACKAGE_REF


class Price(_Strict):
    """USD per million tokens, as providers quote them."""

    input_per_mtok: float = Field(ge=0)  # price of one million prompt tokens, in US dollars
    output_per_mtok: float = Field(ge=0)  # price of one million output tokens, in US dollars

    def cost(self, prompt_tokens: int, output_tokens: int) -> float:
        return (prompt_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


class RandomInitSource(_Strict):
    """A causal LM built locally from a config with seeded random weights; its text is meaningless."""

    kind: Literal["random_init"]
    # a transformers architecture (e.g. `gpt2`, `llama`, `qwen2`) built with random weights
    architecture: Literal["gpt2", "llama", "qwen2"]
    # keyword arguments of the architecture's config (layers, widths, heads)
    config: dict[str, Any] = Field(default_factory=dict)
    # the tokenizer the model uses (a hub id, a local folder or a packaged one)
    tokenizer: ModelRef = ENCODER_PACKAGE_REF
    seed: int = 0  # seed of the random weights


class HubSource(_Strict):
    """Weights from the Hugging Face Hub (or a local directory laid out like a hub snapshot)."""

    kind: Literal["hub"]
    id: ModelRef  # a hub id or a local folder
    revision: str | None = None  # the hub revision (a commit, tag or branch) to load


class OpenAISource(_Strict):
    """A model behind an OpenAI-compatible HTTP API (`vllm serve`, `transformers serve`, …)."""

    kind: Literal["openai"]
    base_url: str  # e.g. http://127.0.0.1:8000/v1
    model: str  # the name the server knows the model by
    revision: str | None = None  # recorded in the cache key; servers do not report it
    api: Literal["completions", "chat"] = "completions"  # which endpoint: `completions` or `chat` (chat completions)
    api_key_env: str | None = None  # name of the environment variable holding the key
    max_concurrency: int = Field(default=8, gt=0)  # requests in flight to the server at once
    timeout_s: float = Field(default=120.0, gt=0)  # seconds to wait for one response
    # retries of a failed request (backoff; a 4xx other than 429 is not retried)
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
    dataset: str  # the fleet dataset whose prompts the responses are joined to
    column: str | None = None  # the model's column in a routerbench or routellm dataset (default: the model name)
    file: ConfigPath | None = None  # a long JSON-lines table, one (prompt, model) response per line
    key_field: str = "query"  # the field joined to each prompt's source row id (dotted paths reach nested values)
    response_field: str = "response"  # the field holding the response text
    model_field: str | None = "model_name"  # keep only lines whose model_field equals `column`
    # the field holding each response's quality label (None: scored by the fleet's metric)
    label_field: str | None = "performance"
    cost_field: str | None = "cost"  # the field holding each response's cost (None: priced from the model's price)


ModelSource = Annotated[
    RandomInitSource | HubSource | OpenAISource | TableSource, Field(discriminator="kind")
]

class SamplingOverrides(_Strict):
    """Per-model changes to `generation.sampling`; unset fields keep the fleet default."""

    temperature: float | None = Field(default=None, ge=0)  # this model's temperature (None: the fleet's)
    top_p: float | None = Field(default=None, gt=0, le=1)  # this model's nucleus mass (None: the fleet's)
    max_tokens: int | None = Field(default=None, gt=0)  # this model's output limit (None: the fleet's)
    # this model's frequency penalty (None: the fleet's)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    repetition_penalty: float | None = Field(default=None, gt=0)  # this model's repetition penalty (None: the fleet's)
    stop: list[str] | None = None  # this model's stop strings (None: the fleet's)
    seed: int | None = None  # this model's sampling seed (None: the fleet's)
    ignore_eos: bool | None = None  # keep generating past the end-of-sequence token (vLLM; for fixed-length profiling)


class Sampling(_Strict):
    """Greedy by default (METHODS.md): one deterministic response per (prompt, model)."""

    temperature: float = Field(default=0.0, ge=0)  # sampling temperature (0: greedy)
    top_p: float = Field(default=1.0, gt=0, le=1)  # nucleus sampling's probability mass
    max_tokens: int = Field(default=64, gt=0)  # the most tokens a response may have
    frequency_penalty: float = Field(default=0.0, ge=-2, le=2)  # OpenAI-style frequency penalty (002: 1.2)
    repetition_penalty: float = Field(default=1.0, gt=0)  # multiplicative repetition penalty (1: none)
    stop: list[str] = Field(default_factory=list)  # strings that end a response
    seed: int | None = None  # sampling seed, where the engine takes one
    # generate exactly max_tokens (vLLM's `ignore_eos`; the transformers engine's min_new_tokens; sent
    # to OpenAI-compatible servers, which vLLM's honours): for profiling and engine comparisons
    ignore_eos: bool = False

    def merged(self, overrides: SamplingOverrides | None) -> Sampling:
        if overrides is None:
            return self
        return self.model_copy(update=overrides.model_dump(exclude_none=True))


class VllmOptions(_Strict):
    """`vllm.LLM` engine arguments; the tensor-parallel size comes from the model's tier.
    `python`: the interpreter of an environment that has vLLM (`make vllm-env`:
    `.venv-vllm/bin/python`), for when the pipeline's own cannot hold it; else
    `$ROUTEFORGE_VLLM_PYTHON`, else vLLM imported in-process. On vLLM's CPU build the KV cache is
    sized in bytes for `max_num_seqs` sequences of `max_model_len` tokens (`core.vllm_env.kv_cache_bytes`)
    unless `kv_cache_memory_bytes` says otherwise; `gpu_memory_utilization` (a share of the memory
    node there) then only bounds what vLLM may take."""

    # the interpreter of an environment with vLLM (`.venv-vllm/bin/python`; None: $ROUTEFORGE_VLLM_PYTHON, else in-
    # process)
    python: str | None = None
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)  # share of the accelerator's memory vLLM may take
    # the longest sequence, prompt and output, in tokens (None: the model's)
    max_model_len: int | None = Field(default=None, gt=0)
    max_num_seqs: int = Field(default=16, ge=1, le=4096)  # sequences batched at once
    # the KV cache's size in bytes (CPU build; None: sized for max_num_seqs × max_model_len)
    kv_cache_memory_bytes: int | None = Field(default=None, gt=0)
    dtype: str = "auto"  # weights' dtype (`auto`, `float16`, `bfloat16`, `float32`)
    enforce_eager: bool = False  # run without CUDA graphs (slower; less memory, quicker start)
    enable_prefix_caching: bool = True  # reuse the KV cache of shared prompt prefixes


class ModelArchitecture(_Strict):
    """What sizes a model's weights and KV cache (its config.json), for the simulator's per-instance
    KV capacity (profiling.kv_capacity)."""

    params_b: float = Field(gt=0, le=10_000, description="parameters, in billions")
    layers: int = Field(ge=1, le=1000, description="transformer layers that keep a KV cache")
    kv_heads: int = Field(ge=1, le=1024, description="key/value heads per layer (num_key_value_heads)")
    head_dim: int = Field(ge=1, le=4096, description="dimension of one attention head")
    dtype_bytes: float = Field(default=2.0, gt=0, le=8, description="bytes per weight and KV element (bf16: 2)")


class ModelSpec(_Strict):
    name: Name  # the model's name in the fleet, the bundle and the routing decisions
    # how responses are produced: `vllm`, `openai` (any OpenAI-compatible server), `transformers` (in-process),
    # `table_import`, or an engine a module registers (`core.kinds.ENGINES`)
    engine: Annotated[str, OneOf(ENGINES)]
    source: ModelSource
    price: Price | None = None
    sampling: SamplingOverrides | None = None
    chat_template: bool = False  # wrap the prompt in the model's (or server's) chat template
    vllm: VllmOptions = VllmOptions()
    # layers, KV heads, head size and parameters: with each tier's hardware memory, the instance's KV capacity
    architecture: ModelArchitecture | None = None

    @model_validator(mode="after")
    def _engine_matches_source(self) -> ModelSpec:
        takes = ENGINES.entry(self.engine).metadata.get("sources")  # what the engine's module registered
        if takes is not None and self.source.kind not in takes:
            raise ValueError(
                f"model {self.name!r}: engine {self.engine!r} cannot use a {self.source.kind!r} source "
                f"(it takes {sorted(takes)})"
            )
        return self
