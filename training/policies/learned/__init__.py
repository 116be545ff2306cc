"""The learned routing policies, one module each: what a policy is trained on (its simulator
environment), how (its trainer and that trainer's settings section of the fleet file), how it acts
when evaluated, and what its exported ONNX graph outputs. `base.LEARNED_POLICIES` finds them; the
routing evaluation (`training.policies.evaluation`) and the export (`assets/policies.py`) ask it,
never a policy's name.
"""
