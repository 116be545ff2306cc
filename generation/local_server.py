"""Start a local OpenAI-compatible server for a sweep, and stop it afterwards: `transformers serve
--continuous-batching` for a `transformers` model, vLLM's own server for a `vllm` model.

Used where a tier's model runs on this machine but its latency under load must be measured the way
a router sees it: through an OpenAI-compatible server with continuous batching. vLLM's server also
exports its scheduler's state on `/metrics`, which the sweep scrapes at every request.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from routeforge.core.vllm_env import kv_cache_bytes, kv_cache_failure, on_cpu_build


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(proc: subprocess.Popen, url: str, log: Path, timeout_s: float = 180) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode}): {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"server at {url} not healthy after {timeout_s} s: {log.read_text()[-3000:]}")


def load_model(base_url: str, model: str, log: Path, timeout_s: float = 300) -> None:
    """One one-token completion, waited for: `transformers serve` answers /health before it has
    loaded any model and loads one on its first request, which on a busy machine can outlast a
    client's timeout (and the first requests would then be retried, or timed with the load in them)."""
    body = json.dumps({"model": model, "prompt": "Hello", "max_tokens": 1, "stream": False}).encode()
    request = urllib.request.Request(f"{base_url}/completions", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as r:
            r.read()
    except OSError as exc:
        raise RuntimeError(f"server at {base_url} could not load {model}: {exc}: {log.read_text()[-3000:]}") from exc


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


@contextmanager
def transformers_serve(model_dir: Path, log: Path, device: str = "cpu", port: int | None = None,
                       kv_cache_memory_fraction: float | None = None) -> Iterator[str]:
    """Yield the server's base URL (ending in /v1) once /health answers and the model in `model_dir`
    is loaded (`load_model`); stop it on exit.

    `kv_cache_memory_fraction` caps continuous batching's KV cache (`--cb-max-memory-percent`); on
    CPU it defaults to 0.1 of host memory, because transformers' own default (0.6–0.9 of what is
    free) took 14.6 GB of a 24 GB machine for a 2-layer model and starved every other process."""
    port = port or free_port()
    exe = Path(sys.executable).parent / "transformers"
    log.parent.mkdir(parents=True, exist_ok=True)
    if kv_cache_memory_fraction is None and device == "cpu":
        kv_cache_memory_fraction = 0.1
    memory = ["--cb-max-memory-percent", str(kv_cache_memory_fraction)] if kv_cache_memory_fraction else []
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [str(exe), "serve", str(model_dir), "--continuous-batching", *memory, "--host", "127.0.0.1",
             "--port", str(port), "--device", device, "--log-level", "warning"],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
    try:
        wait_healthy(proc, f"http://127.0.0.1:{port}/health", log)
        load_model(f"http://127.0.0.1:{port}/v1", str(model_dir), log)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop(proc)


@contextmanager
def vllm_serve(model_dir: Path, log: Path, python: str | None, *, dtype: str = "auto", max_model_len: int | None = None,
               gpu_memory_utilization: float = 0.9, enforce_eager: bool = False, port: int | None = None,
               timeout_s: float = 600, max_num_seqs: int = 16,
               kv_cache_memory_bytes: int | None = None, extra_args: Sequence[str] = (),
               cpus: str | None = None) -> Iterator[str]:
    """vLLM's OpenAI-compatible server (`python -m vllm.entrypoints.openai.api_server`: the `vllm
    serve` console script fails under the CPU build's distribution name) for the model in
    `model_dir`, under `python` (the vLLM environment's interpreter; None: this one). Yields the base
    URL (ending in /v1) once /health answers and one completion has run; stopped on exit. On the CPU
    build the KV cache is sized in bytes from the model (`core.vllm_env.kv_cache_bytes`); a server
    that still cannot start says, in one line, what it asked for and what was free. `cpus` (a CPU
    list, "0" or "2-3"): the server is pinned there (`taskset`) with its OpenMP threads bound to them
    (`VLLM_CPU_OMP_THREADS_BIND`), so several CPU servers share a machine without contending."""
    port = port or free_port()
    pin = ["taskset", "-c", cpus] if cpus else []
    command = [*pin, python or sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
               "--host", "127.0.0.1", "--port", str(port), "--dtype", dtype,
               "--gpu-memory-utilization", str(gpu_memory_utilization), "--max-num-seqs", str(max_num_seqs)]
    if kv_cache_memory_bytes or on_cpu_build():
        size = kv_cache_memory_bytes or kv_cache_bytes(model_dir, max_model_len, max_num_seqs, dtype)
        command += ["--kv-cache-memory-bytes", str(size)]
    if max_model_len:
        command += ["--max-model-len", str(max_model_len)]
    if enforce_eager:
        command.append("--enforce-eager")
    command += list(extra_args)  # any other server flag (`--enable-prefix-caching`, `--block-size 16`)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "HF_HUB_OFFLINE": "1",
                                     **({"VLLM_CPU_OMP_THREADS_BIND": cpus} if cpus else {})})
    try:
        try:
            wait_healthy(proc, f"http://127.0.0.1:{port}/health", log, timeout_s=timeout_s)
        except RuntimeError as error:
            memory = kv_cache_failure(log.read_text(errors="replace"))
            if memory is None:
                raise
            raise RuntimeError(f"vLLM could not start for {model_dir}: {memory} (log: {log})") from error
        load_model(f"http://127.0.0.1:{port}/v1", str(model_dir), log)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop_group(proc)


def stop_group(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """SIGTERM the process's group (vLLM's engine runs in child processes; the process must have been
    started with `start_new_session=True`), SIGKILL what is left after `timeout` seconds."""
    import contextlib
    import signal

    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout)
