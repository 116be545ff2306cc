"""004's PPO over the queue's state, acting as a bias on the shortest queue: `policy.py`, `settings.py`, `training.py`
(the layout: `training/policies/learned/__init__.py`); its settings are the fleet file's
`routing_evaluation.learned.ppo_queue_bias`, `settings.py`.
`benchmarks/rl_slot_distribution.py` trains 004's slot-distribution policy (not a registered one) with
this folder's PPO too.
"""
