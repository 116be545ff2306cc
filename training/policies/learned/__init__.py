"""The learned routing policies, one folder each: `<policy>/policy.py` says what the policy is trained
on (its simulator environment), how (its trainer and that trainer's settings section of the fleet
file), how it acts when evaluated, and what its exported ONNX graph outputs; `training.py` is its
trainer and `model.py` its own network. A policy's trainer settings stay in `core/config/policies.py`:
the fleet file's schema is validated below the training layer. What the policies share (rollouts, the
teacher, the paired baseline, the MLP, ONNX export) is in `training/policies/rl/`.
`base.LEARNED_POLICIES` finds them; the routing evaluation (`training.policies.evaluation`) and the
export (`assets/policies.py`) ask it, never a policy's name.
"""
