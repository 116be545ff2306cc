"""004's PPO over the queue's state, acting as a bias on the shortest queue: this policy's home.

- `policy.py`: what it is trained on (its simulator environment), how it acts when evaluated and what
  its exported ONNX graph outputs; registered in `LEARNED_POLICIES` under its name
- `training.py`: 004's PPO, returning a `TrainerRun`; `benchmarks/rl_slot_distribution.py` trains 004's
  slot-distribution policy (not a registered policy) with it too

Its settings are the fleet file's `routing_evaluation.ppo` section, `core.config.policies.PpoSettings`:
the fleet file's schema is validated below the training layer, so the settings model cannot live here.
What the policies share (rollouts, the teacher, the paired baseline, ONNX export) is in `training/policies/rl/`.
"""
