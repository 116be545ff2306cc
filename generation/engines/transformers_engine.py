"""In-process Hugging Face transformers engine: batched greedy generation with per-row timing.

TTFT, TPOT and E2E are measured, not estimated: a stopping-criteria hook stamps the wall clock after
every decode step, and each row's end is the step at which it emitted EOS (or hit the cap). Rows in
a batch share the batched prefill, so TTFT is the batch's time to first token, as a batching server
would show it. Prompts are sorted by length before batching (length bucketing), so a batch pads
little.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from routeforge.core.config import FleetConfig, ModelSpec
from routeforge.core.kinds import ENGINES
from routeforge.core.model_sources import causal_lm_location
from routeforge.core.storage import Quarantine
from routeforge.generation.engines.base import BaseEngine, ProgressFn, PromptRow, render_prompt, tpot
from routeforge.generation.local_server import transformers_serve


def _hooks():
    """StoppingCriteria / LogitsProcessor subclasses, defined lazily so importing this is cheap."""
    import torch
    from transformers import LogitsProcessor, StoppingCriteria

    class StepClock(StoppingCriteria):
        """Never stops generation; records the time at which each new token became available."""

        def __init__(self) -> None:
            self.stamps: list[float] = []

        def __call__(self, input_ids, scores, **kwargs):
            self.stamps.append(time.perf_counter())
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    class FrequencyPenalty(LogitsProcessor):
        """OpenAI/vLLM frequency penalty: logit -= penalty × times the token was generated so far."""

        def __init__(self, penalty: float, prompt_length: int) -> None:
            self.penalty = penalty
            self.prompt_length = prompt_length

        def __call__(self, input_ids, scores):
            generated = input_ids[:, self.prompt_length :]
            if generated.shape[1] == 0:
                return scores
            counts = torch.zeros_like(scores)
            counts.scatter_add_(1, generated, torch.ones_like(generated, dtype=scores.dtype))
            return scores - self.penalty * counts

    return StepClock, FrequencyPenalty


@ENGINES.register("transformers", sources=("random_init", "hub"), local_weights=True,
                  description="in-process Hugging Face generation, batched, CPU or GPU")
class TransformersEngine(BaseEngine):
    name = "transformers"

    @classmethod
    def create(cls, spec: ModelSpec, config: FleetConfig, cache_dir: Path):
        return cls(spec, config, cache_dir)

    @classmethod
    def local_server(cls, spec: ModelSpec, model_dir: Path, log: Path):
        return transformers_serve(model_dir, log)

    def __init__(self, spec: ModelSpec, config: FleetConfig, cache_dir: Path, device: str | None = None):
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        super().__init__(spec, config)
        self.version = transformers.__version__
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        location, revision = causal_lm_location(spec.source, cache_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(location, revision=revision)
        self.tokenizer.padding_side = "left"  # decoder-only: pad on the left so new tokens line up
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(location, revision=revision).to(self.device).eval()
        self.eos_ids = self._eos_ids()

    def _eos_ids(self) -> set[int]:
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        return set(eos if isinstance(eos, list) else [eos]) - {None}

    def generate(
        self, prompts: list[PromptRow], quarantine: Quarantine, progress: ProgressFn | None = None
    ) -> list[dict[str, Any]]:
        import torch

        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i].text))
        rows: list[dict[str, Any]] = []
        done = 0
        for start in range(0, len(order), self.settings.batch_size):
            batch = [prompts[i] for i in order[start : start + self.settings.batch_size]]
            try:
                with torch.inference_mode():  # scoped: a process-wide switch broke later training in-process
                    rows.extend(self._generate_batch(batch))
            except Exception as exc:  # a failing batch is quarantined, never the whole partition
                for p in batch:
                    quarantine.add(p.prompt_id, f"generation failed: {type(exc).__name__}: {exc}")
            done += len(batch)
            if progress:
                progress(done, len(prompts))
        return rows

    def _generate_batch(self, batch: list[PromptRow]) -> list[dict[str, Any]]:
        s = self.sampling
        limit = getattr(self.model.config, "max_position_embeddings", None) or getattr(
            self.model.config, "n_positions", None
        )
        max_prompt = (limit - s.max_tokens) if limit else None
        enc = self.tokenizer(
            [render_prompt(self.tokenizer, p.text, self.spec.chat_template) for p in batch],
            return_tensors="pt",
            padding=True,
            truncation=max_prompt is not None,
            max_length=max_prompt,
            add_special_tokens=False,
            return_token_type_ids=False,
        ).to(self.device)
        step_clock, frequency_penalty = _hooks()
        clock = step_clock()
        prompt_width = enc["input_ids"].shape[1]
        kwargs: dict[str, Any] = {}
        if s.temperature > 0:
            kwargs.update(do_sample=True, temperature=s.temperature, top_p=s.top_p)
        else:
            kwargs.update(do_sample=False)
        if s.frequency_penalty:
            kwargs["logits_processor"] = [frequency_penalty(s.frequency_penalty, prompt_width)]
        if s.stop:
            kwargs.update(stop_strings=s.stop, tokenizer=self.tokenizer)
        if s.ignore_eos:
            kwargs["min_new_tokens"] = s.max_tokens
        if s.seed is not None:
            import torch

            torch.manual_seed(s.seed)
        start = time.perf_counter()
        out = self.model.generate(
            **enc,
            max_new_tokens=s.max_tokens,
            repetition_penalty=s.repetition_penalty,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=sorted(self.eos_ids) or None,
            stopping_criteria=[clock],
            **kwargs,
        )
        new_tokens = out[:, prompt_width:].tolist()
        prompt_lengths = enc["attention_mask"].sum(dim=1).tolist()
        rows = []
        for p, tokens, n_prompt in zip(batch, new_tokens, prompt_lengths):
            n_out = next((i + 1 for i, t in enumerate(tokens) if t in self.eos_ids), None)
            finish = "stop" if n_out is not None else "length"
            n_out = n_out or len(tokens)
            text = self.tokenizer.decode(tokens[:n_out], skip_special_tokens=True)
            if s.stop and any(stop in text for stop in s.stop):
                cut = min(text.index(stop) for stop in s.stop if stop in text)
                text, finish = text[:cut], "stop"
            ttft = clock.stamps[0] - start
            e2e = clock.stamps[min(n_out, len(clock.stamps)) - 1] - start
            rows.append(
                self.row(
                    p, text=text, prompt_tokens=int(n_prompt), output_tokens=n_out, finish_reason=finish,
                    ttft_s=ttft, tpot_s=tpot(ttft, e2e, n_out), e2e_s=e2e, cost_usd=self.cost(int(n_prompt), n_out),
                )
            )
        return rows
