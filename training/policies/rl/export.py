"""Export a trained policy network to ONNX with its observation and action specs, and check that
ONNX Runtime and PyTorch pick the same actions (`artifacts/deciding/policy.py` is the runtime side)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from routeforge.artifacts.deciding.heuristics import queue_biases
from routeforge.artifacts.deciding.policy import RoutingPolicy


def export_policy(net, folder: Path, observation_spec: dict, action_spec: dict, check_obs: np.ndarray,
                  output: str = "q_values", act: str = "greedy") -> dict:
    """Write `policy.onnx` + `policy.json`; returns the spec with the parity measured on `check_obs`.
    `act`: how the policy routes, "greedy" (argmax) or "sample" (from softmax(logits), as SAC trains)."""
    import torch

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    n_obs = int(observation_spec["size"])
    net = net.eval()
    torch.onnx.export(net, (torch.zeros(1, n_obs),), str(folder / "policy.onnx"), input_names=["observation"],
                      output_names=[output], opset_version=17, dynamo=False,
                      dynamic_axes={"observation": {0: "batch"}, output: {0: "batch"}})
    spec = {"observation": observation_spec, "action": action_spec, "output": output, "act": act}
    (folder / "policy.json").write_text(json.dumps(spec, indent=2))
    with torch.no_grad():
        reference = net(torch.as_tensor(check_obs, dtype=torch.float32)).numpy()
    runtime = RoutingPolicy.load(folder)
    got = runtime.scores(check_obs)
    if output == "bias":  # the action is the rounded biases, all of them

        bounds = tuple(action_spec.get("bounds", (-10.0, 10.0)))
        agree = (queue_biases(got, bounds) == queue_biases(reference, bounds)).all(axis=1)
    else:
        agree = got.argmax(1) == reference.argmax(1)
    spec |= {"onnx_max_abs_diff": float(np.abs(got - reference).max()), "onnx_action_agreement": float(agree.mean())}
    (folder / "policy.json").write_text(json.dumps(spec, indent=2))
    return spec
