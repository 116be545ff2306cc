"""In-process Hugging Face transformers engine: batched greedy generation with per-row timing.

TTFT, TPOT and E2E are measured, not estimated: a stopping-criteria hook stamps the wall clock after
every decode step, and each row's end is the step at which it emitted EOS (or hit the cap). Rows in a
batch share the batched prefill, so TTFT is the batch's time to first token, as a batching server
would show it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from pipelines.config import GenerationSettings, ModelSpec
from pipelines.engines.base import ProgressFn, PromptRow, cache_key
from pipelines.model_sources import causal_lm_location
from pipelines.storage import Quarantine


def _step_clock_class():
    from transformers import StoppingCriteria

    class StepClock(StoppingCriteria):
        """Never stops generation; records the time at which each new token became available."""

        def __init__(self) -> None:
            self.stamps: list[float] = []

        def __call__(self, input_ids, scores, **kwargs):
            import torch

            self.stamps.append(time.perf_counter())
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    return StepClock


class TransformersEngine:
    name = "transformers"

    def __init__(self, spec: ModelSpec, settings: GenerationSettings, cache_dir: Path, device: str = "cpu"):
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.spec = spec
        self.settings = settings
        self.version = transformers.__version__
        location, revision = causal_lm_location(spec.source, cache_dir)
        self.revision = revision
        self.tokenizer = AutoTokenizer.from_pretrained(location, revision=revision)
        self.tokenizer.padding_side = "left"  # decoder-only: pad on the left so new tokens line up
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(location, revision=revision).to(device).eval()
        self.device = device
        self.eos_ids = self._eos_ids()
        self.sampling = {
            "temperature": settings.temperature,
            "max_new_tokens": settings.max_new_tokens,
            "repetition_penalty": settings.repetition_penalty,
        }
        torch.set_grad_enabled(False)

    def _eos_ids(self) -> set[int]:
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = self.tokenizer.eos_token_id
        return set(eos if isinstance(eos, list) else [eos]) - {None}

    def generate(
        self, prompts: list[PromptRow], quarantine: Quarantine, progress: ProgressFn | None = None
    ) -> list[dict[str, Any]]:
        # Sort by length so batches hold similar lengths and pad little.
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i].text))
        rows: list[dict[str, Any]] = []
        done = 0
        for start in range(0, len(order), self.settings.batch_size):
            batch = [prompts[i] for i in order[start : start + self.settings.batch_size]]
            try:
                rows.extend(self._generate_batch(batch))
            except Exception as exc:  # a failing batch is quarantined, never the whole partition
                for p in batch:
                    quarantine.add(p.prompt_id, f"generation failed: {type(exc).__name__}: {exc}")
            done += len(batch)
            if progress:
                progress(done, len(prompts))
        return rows

    def _generate_batch(self, batch: list[PromptRow]) -> list[dict[str, Any]]:
        limit = getattr(self.model.config, "max_position_embeddings", None) or getattr(
            self.model.config, "n_positions", None
        )
        max_prompt = (limit - self.settings.max_new_tokens) if limit else None
        enc = self.tokenizer(
            [p.text for p in batch],
            return_tensors="pt",
            padding=True,
            truncation=max_prompt is not None,
            max_length=max_prompt,
            add_special_tokens=False,
            return_token_type_ids=False,
        ).to(self.device)
        clock = _step_clock_class()()
        sample = self.settings.temperature > 0
        kwargs = {"temperature": self.settings.temperature} if sample else {}
        start = time.perf_counter()
        out = self.model.generate(
            **enc,
            do_sample=sample,
            max_new_tokens=self.settings.max_new_tokens,
            repetition_penalty=self.settings.repetition_penalty,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=sorted(self.eos_ids) or None,
            stopping_criteria=[clock],
            **kwargs,
        )
        new_tokens = out[:, enc["input_ids"].shape[1] :].tolist()
        prompt_lengths = enc["attention_mask"].sum(dim=1).tolist()
        rows = []
        for p, tokens, n_prompt in zip(batch, new_tokens, prompt_lengths):
            n_out = next((i + 1 for i, t in enumerate(tokens) if t in self.eos_ids), None)
            finish = "stop" if n_out is not None else "length"
            n_out = n_out or len(tokens)
            ttft = clock.stamps[0] - start
            e2e = clock.stamps[n_out - 1] - start
            text = self.tokenizer.decode(tokens[:n_out], skip_special_tokens=True)
            cost = self.spec.price.cost(int(n_prompt), n_out) if self.spec.price else None
            rows.append(
                {
                    "prompt_id": p.prompt_id,
                    "model": self.spec.name,
                    "text": text,
                    "prompt_tokens": int(n_prompt),
                    "output_tokens": n_out,
                    "finish_reason": finish,
                    "ttft_s": ttft,
                    "tpot_s": (e2e - ttft) / (n_out - 1) if n_out > 1 else None,
                    "e2e_s": e2e,
                    "engine": self.name,
                    "engine_version": self.version,
                    "sampling": json.dumps(self.sampling, sort_keys=True),
                    "cache_key": cache_key(p.text, self.spec.name, self.revision, self.sampling, self.name),
                    "cost_usd": cost,
                    "label": None,
                }
            )
        return rows
