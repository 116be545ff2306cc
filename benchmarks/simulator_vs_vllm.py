"""How far the simulator is from real servers (issue 60, item 7; issue 70, item 5): vLLM's CPU build
with prefix caching, and the simulator calibrated from that server's own profile, on the same arrival
windows of the Mooncake-format trace (shared prefixes), with prompts up to 4,096 tokens, two instances
behind a round-robin router (each server pinned to a core of its own) and a KV cache small enough to
evict (`--kv-cache-tokens`), chunked prefill on both sides (`--max-num-batched-tokens`).

    .venv/bin/python -m benchmarks.simulator_vs_vllm [--requests 160] [--loads 0.3 0.6 0.9] [--instances 2]
    .venv/bin/python -m benchmarks.simulator_vs_vllm --instances 1 --max-blocks 16 --max-model-len 2048 \
        --kv-cache-tokens 32768 --name simulator_vs_vllm_short     # the earlier setting: one server, short prompts

1. A Llama of random weights (4 layers, hidden 256) served by vLLM's CPU build on 127.0.0.1
   (`make vllm-env`), float32, prefix caching on, at most `--max-num-seqs` running.
2. Its profile, through the server: static batches (b requests of p unique prompt tokens arriving
   together, 24 output tokens each), fitted as every tier is (`profiling.batch_fits.fit_tier`:
   prefill = c + k·b·p, decode step = W + H·context). The simulated instance takes that fit, the
   server's sequence limit and its KV cache (max model length × sequences).
3. Per load (a share of the fitted instances' capacity for the window's mean request): a window of
   the trace (`../shared/data/traces/mooncake_synthetic_trace.jsonl`), each block 64 tokens of its
   own, at most `--max-blocks` blocks a prompt (64: 4,096 tokens) and 48 output tokens, arrivals
   rescaled to that rate; sent open loop, request i to server i mod `--instances`, and run in the
   simulator with as many instances, round-robin alike (`training.policies.simulator.server_replay`),
   so what differs is the serving, not the routing. Each load's blocks are salted apart, so no load
   starts with another's cache. The profile's batches stay within the KV cache.

Reported per load: mean and p95 TTFT and E2E, measured and simulated, their relative error, and the
prefix hit rate on both sides (the server's from its counters). Writes
benchmarks/results/simulator_vs_vllm/simulator_vs_vllm.json.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from benchmarks.common import DATA, parser, results_dir

MODEL = {"kind": "random_init", "architecture": "llama", "seed": 11,
         "config": {"num_hidden_layers": 4, "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
                    "num_key_value_heads": 2, "max_position_embeddings": 8192}}
BLOCK_TOKENS, MAX_BLOCKS, MAX_OUTPUT = 64, 64, 48
PROFILE_BATCHES, PROFILE_PROMPTS, PROFILE_OUTPUT = (1, 2, 4, 8, 16), (64, 256, 768, 2048, 4096), 24


SHARED_PREFIXES, PREFIX_BLOCKS = 6, 6  # the `shared` variant: one of 6 common 6-block prefixes first
PREFIX_BASE = 1 << 40  # their block ids, apart from the trace's


@functools.cache
def trace_rows(path: Path = DATA / "traces" / "mooncake_synthetic_trace.jsonl") -> list[dict]:
    """A Mooncake-format trace's rows, read once (every load and variant takes a window of them)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def trace_requests(n: int, start: int, rate: float, shared: bool = False, max_blocks: int = MAX_BLOCKS,
                   path: Path | None = None):
    """`n` consecutive rows of the Mooncake trace (or the one at `path`) from `start`, arrivals
    rescaled to `rate` req/s.
    `shared`: each prompt first takes one of `SHARED_PREFIXES` common prefixes (seeded per row), as a
    service's system prompts would, then its own trace blocks (a window of 160 consecutive rows
    repeats only 2-7% of its blocks; the trace's reuse comes a median 225 requests later)."""
    from routeforge.profiling.server_requests import ReplayRequest

    window = (trace_rows(path) if path is not None else trace_rows())[start:start + n]
    t = np.array([r["timestamp"] for r in window], dtype=float) / 1000.0
    t = t - t[0]
    t = t * (n / rate) / t[-1] if t[-1] > 0 else np.arange(n) / rate
    rng = np.random.default_rng(start)
    prefixes = [tuple(PREFIX_BASE + k * PREFIX_BLOCKS + j for j in range(PREFIX_BLOCKS))
                for k in range(SHARED_PREFIXES)]
    return [ReplayRequest(float(a), ((prefixes[int(rng.integers(SHARED_PREFIXES))] if shared else ())
                                     + tuple(int(h) for h in r["hash_ids"]))[:max_blocks],
                          int(max(2, min(MAX_OUTPUT, r["output_length"])))) for a, r in zip(t, window)]


def profile_server(url: str, model: str, vocab: int, max_num_seqs: int, log, kv_tokens: int,
                   max_prompt: int, step_tokens: int | None = None) -> tuple[dict, list]:
    """Static batches through the server (`server_requests.static_batches`), fitted like a tier's
    batch profile; each batch's prompts and outputs within the KV cache, its prompts within `max_prompt`."""
    from routeforge.profiling.batch_fits import BatchMeasurement, fit_tier
    from routeforge.profiling.server_requests import static_batches

    rows = []
    for b in (b for b in PROFILE_BATCHES if b <= max_num_seqs):
        prompts = [p for p in PROFILE_PROMPTS if p <= max_prompt and b * (p + PROFILE_OUTPUT) <= kv_tokens]
        if prompts:
            rows += static_batches(url, model, [b], prompts, PROFILE_OUTPUT, BLOCK_TOKENS, vocab, salt=10_000 + 100 * b)
    for r in rows:
        log(f"  profile b={r['batch_size']:>2} p={r['prompt_tokens']:>4}: TTFT {r['prefill_s'] * 1e3:7.1f} ms, "
            f"decode step {r['decode_iter_s'] * 1e3:6.2f} ms")
    return fit_tier([BatchMeasurement(**r) for r in rows], step_tokens).to_dict(), rows


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--requests", type=int, default=160, help="requests per load")
    p.add_argument("--loads", type=float, nargs="+", default=[0.3, 0.6, 0.9])
    p.add_argument("--variants", nargs="+", default=["trace", "shared"], choices=["trace", "shared"])
    p.add_argument("--max-num-seqs", type=int, default=16)
    p.add_argument("--max-model-len", type=int, default=4160, help="the longest prompt (4,096) and its output")
    p.add_argument("--max-blocks", type=int, default=MAX_BLOCKS, help="64-token blocks a prompt keeps at most")
    p.add_argument("--instances", type=int, default=2, help="vLLM servers behind the round-robin router")
    p.add_argument("--kv-cache-tokens", type=int, default=16384, help="each server's KV cache (cache pressure)")
    p.add_argument("--max-num-batched-tokens", type=int, default=1024, help="each step's token budget, both sides")
    p.add_argument("--name", default="simulator_vs_vllm")
    p.add_argument("--vllm-python", default=str(Path.cwd() / ".venv-vllm" / "bin" / "python"))
    args = p.parse_args()
    if args.quick:
        args.requests, args.loads = 40, [0.5]
    import requests as http
    from routeforge.artifacts.common.state_folder import state_root
    from routeforge.core.config import RandomInitSource
    from routeforge.core.model_sources import build_random_init
    from routeforge.generation.local_server import vllm_serve
    from routeforge.training.policies.simulator.instance import InstanceProfile
    from routeforge.training.policies.simulator.server_replay import replay_check

    out_dir = results_dir("simulator_vs_vllm")
    model_dir = build_random_init(RandomInitSource(**MODEL), state_root() / "models")  # weights stay out of git
    vocab = int(json.loads((model_dir / "config.json").read_text())["vocab_size"])
    started = time.perf_counter()
    from contextlib import ExitStack

    from routeforge.core.vllm_env import kv_cache_bytes

    kv_bytes = kv_cache_bytes(model_dir, args.kv_cache_tokens, 1, "float32")
    cores = os.cpu_count() or 1
    with ExitStack() as stack:
        urls = [stack.enter_context(vllm_serve(
            model_dir, state_root() / "logs" / f"simulator_vs_vllm-server-{k}.log", args.vllm_python, dtype="float32",
            max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs, enforce_eager=True,
            kv_cache_memory_bytes=kv_bytes,
            cpus=str(k % cores) if args.instances > 1 else None,
            extra_args=["--enable-prefix-caching", "--max-num-batched-tokens", str(args.max_num_batched_tokens)]))
            for k in range(args.instances)]
        bases = [u.removesuffix("/v1") for u in urls]

        def metrics() -> str:
            return "\n".join(http.get(f"{b}/metrics", timeout=30).text for b in bases)

        kv_tokens = kv_tokens_of(state_root() / "logs" / "simulator_vs_vllm-server-0.log", args.kv_cache_tokens)
        fit, measurements = profile_server(urls[0], str(model_dir), vocab, args.max_num_seqs, print, kv_tokens,
                                           args.max_blocks * BLOCK_TOKENS, args.max_num_batched_tokens)
        profile = InstanceProfile.from_fit(fit, max_running=args.max_num_seqs, kv_capacity_tokens=kv_tokens,
                                           max_num_batched_tokens=args.max_num_batched_tokens)
        rows = []
        for v, variant in enumerate(args.variants):
            for i, load in enumerate(args.loads):
                start = i * args.requests
                probe = trace_requests(args.requests, start, 1.0, variant == "shared", args.max_blocks)
                prompt = float(np.mean([len(r.block_ids) * BLOCK_TOKENS for r in probe]))
                output = float(np.mean([r.output_tokens for r in probe]))
                rate = load * args.instances * profile.capacity_rps(prompt, output)
                requests = trace_requests(args.requests, start, rate, variant == "shared", args.max_blocks)
                row = {"variant": variant, "load": load, "rate_rps": rate, "prompt_mean": prompt, "output_mean": output,
                       "prompt_max": max(len(r.block_ids) * BLOCK_TOKENS for r in requests),
                       **replay_check(urls, str(model_dir), profile, requests, BLOCK_TOKENS, vocab,
                                      salt=100 * v + i, metrics=metrics)}
                rows.append(row)
                print(f"{variant} load {load}: {rate:.2f} req/s; TTFT mean {row['measured_ttft_mean_s'] * 1e3:.0f} ms "
                      f"measured, {row['simulated_ttft_mean_s'] * 1e3:.0f} simulated ({row['ttft_mean_error']:+.1%}), "
                      f"p95 {row['ttft_p95_error']:+.1%}; E2E mean {row['measured_e2e_mean_s']:.3f} s / "
                      f"{row['simulated_e2e_mean_s']:.3f} s ({row['e2e_mean_error']:+.1%}), p95 "
                      f"{row['e2e_p95_error']:+.1%}; hit rate {row['measured_prefix_hit_rate']} measured, "
                      f"{row['simulated_prefix_hit_rate']:.3f} simulated", flush=True)
    result = {"model": MODEL, "block_tokens": BLOCK_TOKENS, "max_blocks": args.max_blocks,
              "max_output_tokens": MAX_OUTPUT, "instances": args.instances, "kv_cache_tokens": kv_tokens,
              "max_num_batched_tokens": args.max_num_batched_tokens,
              "max_num_seqs": args.max_num_seqs, "max_model_len": args.max_model_len, "fit": fit,
              "profile": measurements, "loads": rows, "wall_s": round(time.perf_counter() - started, 1),
              "machine": platform.platform(), "published_claim": "under 9% (Vidur)",
              "target": "TTFT mean within 15%, E2E mean within 10%, p95 within 20% (issue 70)"}
    (out_dir / f"{args.name}{'_quick' if args.quick else ''}.json").write_text(json.dumps(result, indent=2))


def kv_tokens_of(server_log: Path, asked: int) -> int:
    """The server's KV cache in tokens as its log states it ("GPU KV cache size: N tokens"), else the
    tokens asked for (the bytes were sized for them)."""
    import re

    found = re.findall(r"KV cache size: ([\d,]+) tokens", server_log.read_text(errors="replace"))
    return int(found[-1].replace(",", "")) if found else asked


if __name__ == "__main__":
    main()
