"""vLLM's offline engine in a process of its own, spoken to in JSON lines.

Why a process: vLLM pins transformers (the CPU build 0.32.0: >= 5.16.1, < 5.20) below the version
the rest of the pipeline runs, so it lives in an environment of its own (`make vllm-env` builds
`.venv-vllm`) and the `vllm` engine talks to it through this worker (docs/architecture.md). Where
vLLM imports in the pipeline's own interpreter (a GPU image), the engine calls it in-process and
this module only lends it `request_timings`.

This file imports nothing from routeforge at module level: it runs as a script under the other
environment's interpreter. Protocol, one JSON object per line:
  in:  {"llm": {<vllm.LLM keyword arguments>}, "sampling": {<vllm.SamplingParams keyword arguments>}}
  out: {"ready": true, "version": "<vllm version>"}   (or {"error": "..."} and exit)
  in:  {"prompts": ["<rendered prompt>", ...]}
  out: {"rows": [{"text", "prompt_tokens", "output_tokens", "finish_reason", "ttft_s", "e2e_s"}, ...]}
       or {"error": "<type>: <message>"} (the engine quarantines that chunk; the worker goes on)
The protocol uses a duplicate of the original stdout; file descriptor 1 is pointed at stderr, so
whatever vLLM or its workers print cannot corrupt it. End of input ends the worker.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any


def request_timings(metrics: Any) -> tuple[float | None, float | None]:
    """(TTFT, E2E) in seconds from a vLLM RequestOutput.metrics object of either engine version:
    V1 engines give a `RequestStateStats` (`first_token_latency`, monotonic `first_token_ts` /
    `last_token_ts`), V0 engines a `RequestMetrics` (wall-clock `arrival_time`, `first_token_time`,
    `last_token_time`)."""
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


def output_rows(outputs: list[Any]) -> list[dict[str, Any]]:
    """The fields of a `responses` row that vLLM's RequestOutputs give, one per output."""
    rows = []
    for out in outputs:
        completion = out.outputs[0]
        ttft, e2e = request_timings(getattr(out, "metrics", None))
        rows.append({"text": completion.text, "prompt_tokens": len(out.prompt_token_ids or []),
                     "output_tokens": len(completion.token_ids),
                     "finish_reason": str(completion.finish_reason or "unknown"), "ttft_s": ttft, "e2e_s": e2e})
    return rows


def _take_the_group_down(signum, frame) -> None:
    """SIGTERM, sent when the engine's process died (PR_SET_PDEATHSIG): vLLM's EngineCore and its
    workers are this process's children and would outlive it; they share its process group (the
    engine starts it with setsid), so the whole group, this process included, gets SIGKILL."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if os.getpgrp() == os.getpid():
        os.killpg(0, signal.SIGKILL)
    sys.exit(128 + signum)


def _keep_the_group_handler() -> None:
    """vLLM installs its own SIGTERM handler while it builds its engine; a SIGTERM that then arrives
    (the engine's process died) ends this process by vLLM's handler, before its EngineCore is there to
    be shut down, and the EngineCore outlived it (seen in CI). The worker's SIGTERM always means "the
    engine is gone", so this process keeps `_take_the_group_down` and ignores a change of it."""
    install, worker = signal.signal, os.getpid()

    def guarded(signum, handler):
        if signum == signal.SIGTERM and os.getpid() == worker:  # a forked child of vLLM's sets its own
            return signal.getsignal(signal.SIGTERM)
        return install(signum, handler)

    install(signal.SIGTERM, _take_the_group_down)
    signal.signal = guarded


def main() -> int:
    _keep_the_group_handler()
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # vLLM's (and its workers') prints go to stderr from here on
    sys.stdout = sys.stderr

    def send(message: dict[str, Any]) -> None:
        protocol.write(json.dumps(message) + "\n")
        protocol.flush()

    setup = json.loads(sys.stdin.readline() or "{}")
    try:
        import vllm

        llm = vllm.LLM(**setup["llm"])
        params = vllm.SamplingParams(**setup["sampling"])
    except Exception as exc:  # reported to the engine in one line; the log has the rest
        send({"error": f"{type(exc).__name__}: {exc}"})
        return 1
    send({"ready": True, "version": vllm.__version__})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            outputs = llm.generate(json.loads(line)["prompts"], params, use_tqdm=False)
            send({"rows": output_rows(outputs)})
        except Exception as exc:
            send({"error": f"{type(exc).__name__}: {exc}"})
    return 0


if __name__ == "__main__":  # vLLM spawns workers: only the script itself may start the engine
    sys.exit(main())
