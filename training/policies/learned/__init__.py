"""The learned routing policies, one folder each: `<policy>/policy.py` says what the policy is trained
on (its simulator environment), how (its trainer), how it acts when evaluated, and what its exported
ONNX graph outputs; `settings.py` is its settings model (the fleet file's
`training.routing_evaluation.learned.<policy>`), `training.py` its trainer and `model.py` its own
network. What the policies share (rollouts, the teacher, the paired baseline, the MLP, ONNX export) is
in `training/policies/rl/`, their shared settings in `settings.py` here.
`base.LEARNED_POLICIES` finds them; the routing evaluation (`training.policies.evaluation`) and the
export (`assets/policies.py`) ask it, never a policy's name.
"""
