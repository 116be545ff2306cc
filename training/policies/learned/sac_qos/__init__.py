"""000's SAC over the QoS graph (the HAN network and its MLP ablation): this policy's home.

- `policy.py`: what it is trained on (its simulator environment), how it acts when evaluated and what
  its exported ONNX graph outputs; registered in `LEARNED_POLICIES` under its name
- `training.py`: its trainer, returning a `TrainerRun`
- `model.py`: its own network (shared ones: `training/policies/rl/networks.py`)

Its settings are the fleet file's `routing_evaluation.sac` section, `core.config.policies.SacSettings`:
the fleet file's schema is validated below the training layer, so the settings model cannot live here.
What the policies share (rollouts, the teacher, the paired baseline, ONNX export) is in `training/policies/rl/`.
"""
