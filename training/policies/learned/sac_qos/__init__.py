"""000's SAC over the QoS graph (the HAN network and its MLP ablation): `policy.py`, `training.py`, `model.py`
(the layout: `training/policies/learned/__init__.py`); its settings are the fleet file's
`routing_evaluation.sac`, `core.config.policies.SacSettings`.
"""
