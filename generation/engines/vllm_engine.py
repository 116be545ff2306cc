"""vLLM offline batch engine (`vllm.LLM.generate`), in-process or in a worker process.

The whole chunk goes to `LLM.generate` at once so vLLM's scheduler batches it continuously. The
tensor- and pipeline-parallel sizes come from the model's tier. Per-request timing is read from
`RequestOutput.metrics` (stats logging on), as `vllm_worker.request_timings` explains. All requests
of an offline batch arrive together, so TTFT includes the time a request queued behind the others:
it is a batch measurement, not a serving-latency profile (the profiling stage measures that).

Where vLLM runs: `core.vllm_env.vllm_python` decides. vLLM's CPU build pins transformers below the
pipeline's, so on a machine without a GPU image vLLM lives in `.venv-vllm` and this engine drives
`vllm_worker.py` there over pipes; with vLLM importable here (a GPU image built for it), in-process.
Both produce the same rows: text, token counts from vLLM's own token ids, measured timings.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from routeforge.core.config import FleetConfig, ModelSpec
from routeforge.core.kinds import ENGINES
from routeforge.core.model_sources import causal_lm_location
from routeforge.core.storage import Quarantine
from routeforge.core.vllm_env import kv_cache_bytes, on_cpu_build, vllm_python
from routeforge.generation.engines.base import BaseEngine, ProgressFn, PromptRow, render_prompt, tpot
from routeforge.generation.engines.vllm_worker import output_rows
from routeforge.generation.local_server import vllm_serve

WORKER = Path(__file__).with_name("vllm_worker.py")
READY_TIMEOUT_S = 900.0  # model load and KV-cache set-up of a worker
CHUNK_TIMEOUT_S = 3600.0  # one chunk's generation


def _die_with_parent(parent: int):
    """What the worker runs before its program: a process group of its own, and SIGTERM when the
    engine's process `parent` dies (even by SIGKILL), on which the worker takes its whole group down
    (vLLM's EngineCore and its workers are its children: left alone they outlived it, pinned to a
    core and holding memory, and slowed every later test). An engine that died before the request
    took effect sends no signal (prctl(2)), so the worker checks its parent right after and exits.
    Linux; elsewhere the worker still exits at the end of its input, after the chunk in hand."""

    def setup() -> None:
        import ctypes

        os.setsid()
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the engine is already gone: start nothing
            os._exit(1)

    return setup


class VllmWorker:
    """`vllm_worker.py` under another interpreter: started with the engine's settings, asked one
    chunk at a time, stopped by `close` (or when the engine is collected). Its stderr (vLLM's log)
    goes to `log`; a failure names the log's last lines."""

    def __init__(self, python: str, setup: dict[str, Any], log: Path):
        log.parent.mkdir(parents=True, exist_ok=True)
        self.log = log
        with open(log, "ab") as err:
            self.proc = subprocess.Popen([python, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, text=True, encoding="utf-8",
                                         preexec_fn=_die_with_parent(os.getpid()))
        reply = self.ask(setup, READY_TIMEOUT_S)
        if "error" in reply:
            self.close()
            raise RuntimeError(f"vLLM did not start: {reply['error']} ({self._tail()})")
        self.version = reply["version"]

    def _tail(self) -> str:
        lines = [line for line in self.log.read_text(errors="replace").splitlines() if line.strip()]
        return f"log {self.log}: " + " | ".join(lines[-3:])[-600:]

    def ask(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 1.0)
            if ready:
                line = self.proc.stdout.readline()
                if line:
                    return json.loads(line)
            if self.proc.poll() is not None:
                raise RuntimeError(f"the vLLM worker exited ({self.proc.returncode}); {self._tail()}")
        self.close()
        raise RuntimeError(f"the vLLM worker gave no answer in {timeout_s:.0f} s; {self._tail()}")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # end of input: the worker shuts vLLM down and exits
                self.proc.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)  # the worker leads its group: vLLM's children too
                self.proc.wait(30)

    def __del__(self):
        self.close()


@ENGINES.register("vllm", sources=("random_init", "hub"), local_weights=True,
                  description="vLLM offline batch inference (its CPU build here, the GPU path in production)")
class VllmEngine(BaseEngine):
    name = "vllm"

    @classmethod
    def create(cls, spec: ModelSpec, config: FleetConfig, cache_dir: Path):
        return cls(spec, config, cache_dir)

    @classmethod
    def local_server(cls, spec: ModelSpec, model_dir: Path, log: Path):
        """vLLM's own server, in the vLLM environment."""
        o = spec.vllm
        return vllm_serve(model_dir, log, vllm_python(o.python), dtype=o.dtype, max_model_len=o.max_model_len,
                          gpu_memory_utilization=o.gpu_memory_utilization, enforce_eager=o.enforce_eager)

    def __init__(self, spec: ModelSpec, config: FleetConfig, cache_dir: Path):
        super().__init__(spec, config)
        s, options = self.sampling, spec.vllm
        tier = config.tier_of(spec.name)
        location, revision = causal_lm_location(spec.source, cache_dir)
        llm = {"model": location, "revision": revision,
               "tensor_parallel_size": tier.tensor_parallel_size if tier else 1,
               "pipeline_parallel_size": tier.pipeline_parallel_size if tier else 1,
               "gpu_memory_utilization": options.gpu_memory_utilization, "max_model_len": options.max_model_len,
               "dtype": options.dtype, "enforce_eager": options.enforce_eager,
               "enable_prefix_caching": options.enable_prefix_caching, "seed": s.seed if s.seed is not None else 0,
               "max_num_seqs": options.max_num_seqs,
               "disable_log_stats": False}  # fills RequestOutput.metrics with per-request timestamps
        sampling = {"temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_tokens,
                    "frequency_penalty": s.frequency_penalty, "repetition_penalty": s.repetition_penalty,
                    "stop": s.stop or None, "seed": s.seed, "ignore_eos": s.ignore_eos}
        python = vllm_python(options.python)  # first: without vLLM, one error that says how to get it
        if options.kv_cache_memory_bytes or on_cpu_build():  # bytes the model needs, not a share of the host
            llm["kv_cache_memory_bytes"] = options.kv_cache_memory_bytes or kv_cache_bytes(
                location, options.max_model_len, options.max_num_seqs, options.dtype)
        self.worker: VllmWorker | None = None
        if python is None:
            import vllm

            self.version = vllm.__version__
            self.llm = vllm.LLM(**llm)
            self.params = vllm.SamplingParams(**sampling)
            self.tokenizer = self.llm.get_tokenizer()
        else:
            from transformers import AutoTokenizer

            self.worker = VllmWorker(python, {"llm": llm, "sampling": sampling},
                                     Path(cache_dir) / "logs" / f"vllm-{spec.name}.log")
            self.version = self.worker.version
            self.tokenizer = AutoTokenizer.from_pretrained(location, revision=revision)

    def _outputs(self, texts: list[str]) -> list[dict[str, Any]]:
        if self.worker is None:
            return output_rows(self.llm.generate(texts, self.params, use_tqdm=True))
        reply = self.worker.ask({"prompts": texts}, CHUNK_TIMEOUT_S)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["rows"]

    def generate(
        self, prompts: list[PromptRow], quarantine: Quarantine, progress: ProgressFn | None = None
    ) -> list[dict[str, Any]]:
        try:
            texts = [render_prompt(self.tokenizer, p.text, self.spec.chat_template) for p in prompts]
            outputs = self._outputs(texts)
        except Exception as exc:  # a failing chunk is quarantined, never the whole partition
            for p in prompts:
                quarantine.add(p.prompt_id, f"generation failed: {type(exc).__name__}: {exc}"[:500])
            return []
        rows = []
        for p, out in zip(prompts, outputs):
            n_prompt, n_out = out["prompt_tokens"], out["output_tokens"]
            rows.append(self.row(p, text=out["text"], prompt_tokens=n_prompt, output_tokens=n_out,
                                 finish_reason=out["finish_reason"], ttft_s=out["ttft_s"],
                                 tpot_s=tpot(out["ttft_s"], out["e2e_s"], n_out), e2e_s=out["e2e_s"],
                                 cost_usd=self.cost(n_prompt, n_out)))
        if progress:
            progress(len(prompts), len(prompts))
        return rows

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
