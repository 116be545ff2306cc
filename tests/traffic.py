"""Synthetic production traffic logs in the OpenAI request/response format `prompts.traffic_logs` reads.

A single server whose TPOT grows with the number of requests decoding beside it and whose TTFT grows
with the requests ahead of it: enough structure for latency heads to learn, reproducible by seed."""

import gzip
import json
from pathlib import Path

import numpy as np

TEXTS = ["What is {a} plus {b}?", "Translate 'cat number {a}' to French.", "Write a haiku about {a} boats.",
         "Explain why {a} is larger than {b}."]


def synthetic_log(path: Path, n: int = 400, rate: float = 4.0, model: str = "tiny-llama", seed: int = 0,
                  chat: bool = True, start: float = 1_790_000_000.0, prefix: str = "") -> list[dict]:
    rng = np.random.default_rng(seed)
    t = start
    ends: list[tuple[float, float]] = []  # (first token, end) of earlier requests
    lines = []
    for i in range(n):
        t += rng.exponential(1.0 / rate)
        waiting = sum(1 for f, _ in ends if f > t)
        decoding = sum(1 for f, e in ends if f <= t < e)
        completion = int(rng.integers(8, 64))
        prompt_tokens = int(rng.integers(10, 120))
        ttft = 0.02 + 0.0004 * prompt_tokens + 0.03 * waiting + rng.uniform(0, 0.005)
        tpot = 0.008 + 0.002 * decoding + rng.uniform(0, 0.001)
        e2e = ttft + (completion - 1) * tpot
        ends.append((t + ttft, t + e2e))
        text = prefix + TEXTS[i % len(TEXTS)].format(a=i, b=i * 3 % 17)
        request = {"model": model, "messages": [{"role": "user", "content": text}]} if chat else \
            {"model": model, "prompt": text}
        choice = {"message": {"role": "assistant", "content": "ok " * 3}} if chat else {"text": "ok " * 3}
        lines.append({"timestamp": t, "request": request,
                      "response": {"model": model, "object": "chat.completion" if chat else "text_completion",
                                   "choices": [choice], "usage": {"prompt_tokens": prompt_tokens,
                                                                  "completion_tokens": completion}},
                      "timing": {"ttft_s": round(ttft, 6), "e2e_s": round(e2e, 6)},
                      "metadata": {"task": ["math", "translation", "poetry", "reasoning"][i % 4]}})
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return lines
