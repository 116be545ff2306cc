"""The extension tests' plugins register into process-wide registries: each test's are taken out again."""

import pytest
from routeforge.artifacts.deciding.heuristics import HEURISTICS
from routeforge.core.kinds import ENGINES, METRICS


def _registries():
    from routeforge.artifacts.deciding.components import COMPONENTS
    from routeforge.artifacts.deciding.router import MEMBER_KINDS
    from routeforge.assets.trainers import TRAINERS
    from routeforge.core.kinds import DATASET_KINDS, LEARNED_SETTINGS, READERS
    from routeforge.training.policies.learned.base import LEARNED_POLICIES
    from routeforge.training.predictors.router_family import MEMBER_FITTERS

    return [ENGINES, METRICS, HEURISTICS, DATASET_KINDS, READERS, LEARNED_POLICIES, LEARNED_SETTINGS, MEMBER_KINDS,
            MEMBER_FITTERS, COMPONENTS, TRAINERS]


@pytest.fixture(autouse=True)
def registries_put_back():
    """The registries are process-wide: what a test's plugin registers is taken out again, so the
    tests after it see routeforge's own kinds only (the schema, the evaluations' policy sets)."""
    import sys

    held = []
    for registry in _registries():
        registry.names()  # discovered first: a module imported once does not register again
        held.append((registry, registry.state()))
    yield
    for registry, state in held:
        registry.restore(state)
    for name in [m for m in sys.modules if m.split(".")[0] == "toy_routeforge_ext"
                 or m.startswith(("tests.extensions.toy_learned_policy", "tests.extensions.toy_scorer"))]:
        del sys.modules[name]
    from routeforge.training.policies.learned.base import LEARNED_POLICIES

    assert "most_free_slots" not in HEURISTICS.names() and "last_word" not in ENGINES.names()
    assert "toy_slack_scorer" not in HEURISTICS.names()
    from routeforge.core.kinds import LEARNED_SETTINGS

    assert "toy_clone" not in LEARNED_POLICIES.names() and "toy_clone" not in LEARNED_SETTINGS.names()
