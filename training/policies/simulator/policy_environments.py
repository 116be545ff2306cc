"""The simulator environment an exported learned policy acts in, by its observation's kind.

`training.policies.replay` judges a bundle's learned policies on a trace without their trainers: from
each exported spec (`policy.json`'s `observation`) it needs the environment that builds the same
observation. Each environment module registers its kind here under the name the runtime registered
its builder under (`artifacts.deciding.policy_inputs`), so a policy with a new observation registers
both from its own folder and nothing here changes.

A registration is `from_spec(spec, profiles, models, workload, block_tokens) -> env`: `spec` is the
exported `policy.json` (its `observation`, and its `action` where the environment needs the action's
bounds), `profiles` and `models` the bundle's simulated instances and their models, `workload(seed)`
the episodes, `block_tokens` the prefix cache's block (None: no cache).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from routeforge.artifacts.common.extensions import Registry
from routeforge.artifacts.deciding.policy_inputs.base import input_kind

POLICY_ENVIRONMENTS: Registry[Callable[..., Any]] = Registry("policy environment",
                                                             ("routeforge.training.policies.simulator",))


def environment_for(spec: Mapping[str, Any], profiles: Sequence, models: Sequence[int], workload,
                    block_tokens: int | None = None):
    """The environment whose observation is `spec`'s (an exported `policy.json`); an observation of no
    registered kind is refused naming its variant."""
    observation = spec["observation"]
    kind = input_kind(observation)
    if kind is None:
        raise ValueError(f"no registered observation kind recognises this policy's observation (variant "
                         f"{observation.get('variant')!r}, keys {sorted(observation)})")
    return POLICY_ENVIRONMENTS.get(kind)(dict(spec), list(profiles), list(models), workload, block_tokens)
