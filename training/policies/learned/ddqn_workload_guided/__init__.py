"""001's workload-guided double DQN: `policy.py`, `settings.py`, `training.py`, `model.py`
(the layout: `training/policies/learned/__init__.py`); its settings are the fleet file's
`routing_evaluation.learned.ddqn_workload_guided`, `settings.py`.
"""
