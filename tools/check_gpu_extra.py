"""Check that `routeforge[pipeline,gpu]` resolves: vLLM for GPUs beside the pipeline's torch and
transformers ranges (issue 38). pip's dry run resolves from the index's metadata and installs
nothing; it prints the versions a GPU machine would get, or fails naming the conflict.

    .venv/bin/python -m tools.check_gpu_extra        # .ci/run does this
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        run = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                              "--report", str(report), f"{REPO}[pipeline,gpu]"], capture_output=True, text=True,
                             timeout=900)
        if run.returncode != 0:
            errors = [line for line in run.stderr.splitlines() if "ERROR" in line or "conflict" in line.lower()]
            print(f"routeforge[pipeline,gpu] does not resolve: {' | '.join(errors[-3:]) or run.stderr[-500:]}")
            return 1
        installs = json.loads(report.read_text())["install"]
        chosen = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in installs}
    wanted = ("vllm", "torch", "transformers")
    if "vllm" not in chosen:
        print("routeforge[pipeline,gpu] resolved without vllm")
        return 1
    print("routeforge[pipeline,gpu] resolves: " + ", ".join(f"{n} {chosen.get(n)}" for n in wanted))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
