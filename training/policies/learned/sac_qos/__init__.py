"""000's SAC over the QoS graph (the HAN network and its MLP ablation): `policy.py`, `settings.py`,
`training.py`, `model.py` (the layout: `training/policies/learned/__init__.py`); its settings are the fleet file's
`routing_evaluation.learned.sac_qos_han` and `.sac_qos_mlp`, `settings.py`.
"""
