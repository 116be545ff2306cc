"""The registry of learned-policy observations, and what the `Dispatcher` hands each at a decision.

Why a registry: a learned policy's network is trained on one observation, built by one function from
the router-visible view (`routeforge.artifacts.deciding.observation`), and the runtime must build the
same one before it can ask the network anything. With the builders in the policy runner and a branch
per kind in the dispatcher and the simulator's replay, a policy with a new observation touched files
outside its own folder; now a kind is one `PolicyInput` subclass registered under a name, from its
policy's folder (or a module `$ROUTEFORGE_EXTENSIONS` names), and the dispatcher and replay look it
up by the exported spec.

An exported spec (`policy.json`'s `observation`) names its kind in `kind`; specs written before that
field are recognised by the kind whose `matches(spec)` says so (each built-in kind's is exclusive).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from routeforge.artifacts.common.extensions import Registry
from routeforge.artifacts.deciding.observation import ObservedInstance, RouterView


@dataclass(frozen=True)
class FleetFacts:
    """What a policy input may know of the fleet beyond a decision: its instances' KV capacities in
    tokens and which models some instance serves (indices into the bundle's models)."""

    kv_tokens: tuple[float, ...]
    served_models: tuple[int, ...]

    @property
    def instances(self) -> int:
        return len(self.kv_tokens)


@dataclass
class DecisionContext:
    """One decision as the dispatcher sees it: each instance's latest scrape (`states`: running,
    waiting, kv_usage), the request (`prompt_tokens`, per instance `predicted_output_tokens` and
    `predicted_quality`, and where known `hash_ids`, `block_tokens`), the router's own view, the
    decision's time, the router's output-token estimate per model, and the arrival rate where the
    caller gave one."""

    states: Sequence[Any]
    request: Mapping[str, Any]
    view: RouterView
    now: float
    output_tokens: np.ndarray
    arrivals_per_s: float | None = None

    @cached_property
    def observed(self) -> list[ObservedInstance]:
        """The router-visible observation of every instance now (built once per decision)."""
        return self.view.observe(self.now)


class PolicyInput:
    """One kind of observation, as the registry knows it: which exported specs are its. A kind a
    router cannot build (004's single-server request ages) is registered as this alone, so that a
    bundle's policy of that kind is recognised and named; one it can build is a `LiveInput`."""

    @staticmethod
    def matches(spec: Mapping[str, Any]) -> bool:
        """Whether a spec written before `kind` was recorded is this kind's."""
        return False


class LiveInput(PolicyInput, ABC):
    """A kind the `Dispatcher` builds from the router's view, bound to a loaded policy's spec and the
    fleet (one per dispatcher: a kind may keep state across decisions, such as its own prefix index
    or the arrivals it counted)."""

    def __init__(self, spec: Mapping[str, Any], fleet: FleetFacts):
        self.spec, self.fleet = spec, fleet

    @abstractmethod
    def choose(self, policy, context: DecisionContext) -> int:
        """The instance `policy` (a `RoutingPolicy`) picks for the request, from this observation."""

    def sent(self, instance: int, context: DecisionContext) -> None:
        """The request went to `instance` (the policy's pick, or another the caller allowed): a kind
        with state of its own (a prefix index) records it; most keep nothing."""
        return None


POLICY_INPUTS: Registry[type[PolicyInput]] = Registry("policy observation",
                                                      ("routeforge.artifacts.deciding.policy_inputs",))


def input_kind(spec: Mapping[str, Any]) -> str | None:
    """The registered kind of an exported observation spec: its `kind`, else the kind that recognises it
    (None: none does)."""
    if spec.get("kind") is not None:
        return POLICY_INPUTS.entry(str(spec["kind"])).name  # an unknown kind: UnknownName with the known ones
    return next((e.name for e in POLICY_INPUTS.entries() if e.value.matches(spec)), None)


def live_input(spec: Mapping[str, Any], fleet: FleetFacts) -> LiveInput | None:
    """The input a router builds for `spec`'s policy (None: its kind is not one a router can build)."""
    kind = input_kind(spec)
    value = POLICY_INPUTS.get(kind) if kind is not None else None
    return value(spec, fleet) if isinstance(value, type) and issubclass(value, LiveInput) else None


def best_instance(scores: np.ndarray, first: int, instances: int) -> int:
    """The best-scored instance when a policy's actions are instances `first..first+instances` (the
    others, a wait or a drop, are set aside: the dispatcher decides each request as it comes)."""
    return int(np.argmax(np.asarray(scores)[first:first + instances]))
