"""001's workload-guided double DQN: `policy.py`, `training.py`, `model.py`
(the layout: `training/policies/learned/__init__.py`); its settings are the fleet file's
`routing_evaluation.ddqn`, `core.config.policies.DdqnSettings`.
"""
