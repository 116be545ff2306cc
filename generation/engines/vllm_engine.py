"""vLLM offline batch engine (`vllm.LLM.generate`): the GPU production path, behind the `gpu` extra.

The whole chunk goes to `LLM.generate` at once so vLLM's scheduler batches it continuously. The
tensor- and pipeline-parallel sizes come from the model's tier. Per-request timing is read from
`RequestOutput.metrics`, which vLLM fills when stats logging is on (`disable_log_stats=False`):
V1 engines give a `RequestStateStats` (`first_token_latency`, monotonic `first_token_ts` /
`last_token_ts`), V0 engines a `RequestMetrics` (wall-clock `arrival_time`, `first_token_time`,
`last_token_time`). All requests of an offline batch arrive together, so TTFT includes the time a
request queued behind the others: it is a batch measurement, not a serving-latency profile
(the profiling stage measures that).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from routeforge.core.config import FleetConfig, ModelSpec
from routeforge.core.model_sources import causal_lm_location
from routeforge.core.storage import Quarantine
from routeforge.generation.engines.base import BaseEngine, ProgressFn, PromptRow, render_prompt, tpot


def request_timings(metrics: Any) -> tuple[float | None, float | None]:
    """(TTFT, E2E) in seconds from a vLLM RequestOutput.metrics object of either engine version."""
    if metrics is None:
        return None, None
    if hasattr(metrics, "first_token_latency"):  # V1 RequestStateStats
        ttft = metrics.first_token_latency or None
        first, last = getattr(metrics, "first_token_ts", 0.0), getattr(metrics, "last_token_ts", 0.0)
        e2e = ttft + (last - first) if ttft is not None and last >= first > 0 else None
        return ttft, e2e
    arrival = getattr(metrics, "arrival_time", None)  # V0 RequestMetrics
    first = getattr(metrics, "first_token_time", None)
    end = getattr(metrics, "finished_time", None) or getattr(metrics, "last_token_time", None)
    if arrival is None:
        return None, None
    return (first - arrival if first else None), (end - arrival if end else None)


class VllmEngine(BaseEngine):
    name = "vllm"

    def __init__(self, spec: ModelSpec, config: FleetConfig, cache_dir: Path):
        try:
            import vllm
        except ImportError as exc:
            raise RuntimeError(
                f"model {spec.name!r} uses engine 'vllm', which needs the optional extra: "
                "pip install 'routeforge[gpu]' (on a machine with a supported GPU)"
            ) from exc
        super().__init__(spec, config)
        self.version = vllm.__version__
        s = self.sampling
        tier = config.tier_of(spec.name)
        location, revision = causal_lm_location(spec.source, cache_dir)
        options = spec.vllm
        self.llm = vllm.LLM(
            model=location,
            revision=revision,
            tensor_parallel_size=tier.tensor_parallel_size if tier else 1,
            pipeline_parallel_size=tier.pipeline_parallel_size if tier else 1,
            gpu_memory_utilization=options.gpu_memory_utilization,
            max_model_len=options.max_model_len,
            dtype=options.dtype,
            enforce_eager=options.enforce_eager,
            enable_prefix_caching=options.enable_prefix_caching,
            seed=s.seed if s.seed is not None else 0,
            disable_log_stats=False,  # fills RequestOutput.metrics with per-request timestamps
        )
        self.params = vllm.SamplingParams(
            temperature=s.temperature,
            top_p=s.top_p,
            max_tokens=s.max_tokens,
            frequency_penalty=s.frequency_penalty,
            repetition_penalty=s.repetition_penalty,
            stop=s.stop or None,
            seed=s.seed,
        )
        self.tokenizer = self.llm.get_tokenizer()

    def generate(
        self, prompts: list[PromptRow], quarantine: Quarantine, progress: ProgressFn | None = None
    ) -> list[dict[str, Any]]:
        try:
            texts = [render_prompt(self.tokenizer, p.text, self.spec.chat_template) for p in prompts]
            outputs = self.llm.generate(texts, self.params, use_tqdm=True)
        except Exception as exc:  # a failing chunk is quarantined, never the whole partition
            for p in prompts:
                quarantine.add(p.prompt_id, f"generation failed: {type(exc).__name__}: {exc}"[:500])
            return []
        rows = []
        for p, out in zip(prompts, outputs):
            completion = out.outputs[0]
            n_prompt, n_out = len(out.prompt_token_ids or []), len(completion.token_ids)
            ttft, e2e = request_timings(out.metrics)
            rows.append(
                self.row(
                    p, text=completion.text, prompt_tokens=n_prompt, output_tokens=n_out,
                    finish_reason=str(completion.finish_reason or "unknown"), ttft_s=ttft,
                    tpot_s=tpot(ttft, e2e, n_out), e2e_s=e2e, cost_usd=self.cost(n_prompt, n_out),
                )
            )
        if progress:
            progress(len(prompts), len(prompts))
        return rows
