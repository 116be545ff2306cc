"""A toy learned routing policy, outside routeforge and in one folder (issue 63): `settings.py` is what a
fleet file may give under `training.routing_evaluation.learned.toy_clone`, `observation.py` its own
observation (`toy_load`: its builder, registered with the runtime), `policy.py` its environment (the
simulator's workload-aware dynamics observing `toy_load`, registered for replay), its network, its
trainer (behaviour cloning of a heuristic) and its registration; export and the runtime's action are
the shared ones its `output` names.
`$ROUTEFORGE_EXTENSIONS=tests.extensions.toy_learned_policy` plugs it in (tests/extensions/test_one_folder_policy.py).
"""
