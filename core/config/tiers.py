"""Hardware, tiers (a model on a hardware) and how each tier is profiled."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator
from routeforge.core.config.base import ConfigPath, Name, OneOf, StoreUri, _Strict
from routeforge.core.kinds import PROFILE_KINDS, WORKLOADS


class Hardware(_Strict):
    name: Name  # the hardware's name, referenced by tiers
    accelerator: str = "cpu"  # the accelerator, e.g. `H100-80GB`, `A100-40GB`, `L4` or `cpu`
    count: int = Field(default=1, ge=1)  # accelerators per instance
    # price of one instance per hour, in US dollars (cost per request in the simulator)
    hourly_usd: float | None = Field(default=None, ge=0)
    # memory per accelerator in GiB (default: the driver-reported size of a known accelerator,
    # profiling.kv_capacity.ACCELERATOR_MEMORY_GIB); with the model's architecture it sizes each instance's KV cache
    memory_gib: float | None = Field(default=None, gt=0, le=4096)


class TierProfile(_Strict):
    """How a tier's latency is measured or imported (profiling/).

    - `batch`: controlled static batches in-process with transformers (the grid in
      `profiling.batch`), timing the prefill and every decode iteration (for a `vllm` model, its
      weights under transformers' implementation).
    - `sweep`: a QPS sweep (`profiling.sweep`) against an OpenAI-compatible server: `base_url`, or
      the model's own when it is an `openai` model, or with `serve: true` a server the sweep starts
      on this machine and stops after: `transformers serve --continuous-batching` for a
      `transformers` model, vLLM's OpenAI server (from the vLLM environment) for a `vllm` model.
    - `server_batches`: static batches through a running server's API (`base_url`, `served_model`
      default: the first it lists), the `batch` grid sent as token-id prompts: a live backend as a tier.
    - `splitwise` / `llm_inference_bench`: published measurements in `file`; `key` is the tier's
      name there (splitwise: `llama2-70b@a100-80gb-tp4`; LLM-Inference-Bench:
      `<Model>@<Hardware>x<count>@<Framework>`).
    - `traffic_log`: what production saw: the timed requests of production logs at `logs` that this
      tier served (the line's `tier`, else `served_model` or the tier's model), their state at
      dispatch rebuilt by replaying the log (`profiling.traffic_records`).
    """

    # how the tier's latency is measured or imported: `batch`, `sweep`, `server_batches`, `splitwise`,
    # `llm_inference_bench` or `traffic_log` (the modules of profiling/profile_kinds/, and any
    # `$ROUTEFORGE_EXTENSIONS` registers)
    kind: Annotated[str, OneOf(PROFILE_KINDS)]
    # `sweep` / `server_batches`: the OpenAI-compatible server to measure (a sweep's default: the model's own,
    # for an `openai` model)
    base_url: str | None = None
    # `sweep` / `server_batches`: the name the server knows the model by (default: the model's / the first listed)
    served_model: str | None = None
    serve: bool = False  # `sweep`: start a server on this machine for the sweep and stop it after
    file: ConfigPath | None = None  # `splitwise` / `llm_inference_bench`: the file of published measurements
    key: str | None = None  # `splitwise` / `llm_inference_bench`: the tier's name in that file
    logs: StoreUri | None = None  # traffic_log: a log file, or a folder / fsspec URI of them

    @model_validator(mode="after")
    def _needs(self) -> TierProfile:
        """What the kind's module registered it needs (`needs`) and refuses together (`exclusive`)."""
        metadata = PROFILE_KINDS.entry(self.kind).metadata
        missing = [name for name in metadata.get("needs", ()) if getattr(self, name) is None]
        if missing:
            raise ValueError(f"profile: kind {self.kind} needs {' and '.join(f'`{m}`' for m in missing)}"
                             + (" (a file, folder or fsspec URI)" if missing == ["logs"] else ""))
        for first, second in metadata.get("exclusive", ()):
            if getattr(self, first) and getattr(self, second):
                raise ValueError(f"profile: give either `{first}` or `{second}`, not both")
        return self


class Tier(_Strict):
    """A deployable unit: one model on one hardware type with a parallelism."""

    model: str  # the name of the model it serves
    hardware: str  # the name of the hardware entry it runs on
    tensor_parallel_size: int = Field(default=1, ge=1)  # tensor-parallel ranks (vLLM)
    pipeline_parallel_size: int = Field(default=1, ge=1)  # pipeline-parallel stages (vLLM)
    # identical instances (replicas) of this tier behind the router: the simulator and the routing
    # policies see each; they share the tier's profile and latency heads
    instances: int = Field(default=1, ge=1, le=256)
    profile: TierProfile | None = None
    # the share of accelerator memory the engine may use (vLLM's gpu_memory_utilization): with the
    # hardware's memory and the model's architecture it gives the instance's KV capacity in the simulator
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    # sequences the engine batches at once (vLLM's max_num_seqs); None: the routing evaluation's queue_capacity
    max_num_seqs: int | None = Field(default=None, ge=1, le=4096)
    # tokens one engine step schedules, prefill chunks and decodes together (vLLM's max_num_batched_tokens);
    # None: vLLM V1's OpenAI-server default for the hardware (8,192 with at least 70 GiB per accelerator, else 2,048)
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=1_048_576)

    @property
    def name(self) -> str:
        suffix = f"-tp{self.tensor_parallel_size}" if self.tensor_parallel_size > 1 else ""
        return f"{self.model}@{self.hardware}{suffix}"


class BatchGrid(_Strict):
    """Static batches for `batch` profiling: every (batch size, prompt length, output length) cell."""

    # concurrent requests per measured batch (the grid's first axis)
    batch_sizes: list[PositiveInt] = Field(default_factory=lambda: [1, 2, 4, 8])
    # prompt lengths to measure, in tokens (synthetic prompts of exactly this length)
    prompt_tokens: list[PositiveInt] = Field(default_factory=lambda: [32, 128])
    # output lengths to generate per measured batch, in tokens
    output_tokens: list[PositiveInt] = Field(default_factory=lambda: [16])
    repeats: PositiveInt = 2  # measurements per grid point (their median is kept)
    warmup: int = Field(default=1, ge=0)  # unmeasured batches run first (compilation, caches)


class SweepSettings(_Strict):
    """A QPS sweep: idle run, saturation search, then a grid of offered rates (requests/s).

    Bounded: at most `requests_per_rate` requests and `max_seconds_per_rate` of dispatch per rate,
    each request cut at `request_timeout_s`; past saturation the client caps requests in flight at
    `max_in_flight` and records how long each waited for a slot."""

    # arrival process of each rate: `poisson`, `gamma` (burstiness_cv), `constant`, `square_wave` or
    # `switched_poisson` (profiling/arrivals.py)
    arrival: Annotated[str, OneOf(WORKLOADS, where="arrivals")] = "poisson"
    burstiness_cv: float = Field(default=2.0, gt=0)  # gamma arrivals' coefficient of variation
    rates: list[PositiveFloat] | None = None  # None: saturation_fractions × the measured saturation
    # the swept rates as fractions of the measured saturation (where `rates` is unset)
    saturation_fractions: list[PositiveFloat] = Field(default_factory=lambda: [0.1, 0.3, 0.5, 0.7, 0.9, 1.1, 1.3])
    requests_per_rate: PositiveInt = 300  # the most requests sent per rate
    max_seconds_per_rate: PositiveFloat = 120.0  # the most seconds of dispatch per rate
    warmup_requests: int = Field(default=3, ge=0)  # unmeasured requests sent first
    idle_requests: PositiveInt = 20  # requests sent one at a time first (the unloaded latency)
    saturation_requests: PositiveInt = 100  # requests of the closed-loop saturation measurement
    saturation_concurrency: PositiveInt = 64  # closed-loop concurrency that measures the server's saturation throughput
    max_in_flight: PositiveInt = 256  # past saturation, the client holds at most this many requests in flight
    request_timeout_s: PositiveFloat = 60.0  # each request is cut after this many seconds
    window_s: PositiveFloat = 2.0  # recent-rate window of the client's dead reckoning
    api: Literal["completions", "chat"] = "completions"  # which endpoint the sweep calls: `completions` or `chat`
    max_output_tokens: PositiveInt = 256  # cap on each request's max_tokens (its observed length)
    default_output_tokens: PositiveInt = 64  # where the routing table has no length for the prompt
    extra_body: dict[str, Any] = Field(default_factory=dict)  # e.g. {ignore_eos: true} for vLLM
    # how often the server's /metrics is scraped; on vLLM's CPU build (2 cores) any second connection,
    # a poll as much as a concurrent stream, held streamed chunks back until the end (E2E unchanged)
    metrics_interval_s: PositiveFloat = 0.1
    seed: int = 0  # seed of the arrival times and the prompts drawn


class ProfilingSettings(_Strict):
    batch: BatchGrid = BatchGrid()
    sweep: SweepSettings = SweepSettings()
    held_out_fraction: float = Field(default=0.2, gt=0, lt=1)  # the latest requests of each rate
    # quantiles of the latency fits' residuals recorded with each tier's heads
    residual_quantiles: list[float] = Field(default_factory=lambda: [0.5, 0.9, 0.95, 0.99])
