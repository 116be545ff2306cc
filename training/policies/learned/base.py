"""What every learned routing policy provides (`LearnedPolicy`), what it is trained and judged with
(`Setting`), and what training returns (`TrainedPolicy`).

A new learned policy is one folder here (or a package named by $ROUTEFORGE_EXTENSIONS) whose module
registers an instance: `LEARNED_POLICIES.register("name", default=…)(Policy())`. `default=True` puts it
in the routing evaluation of a fleet that names no policies. Its folder's `settings.py` registers its
settings model under the same name, `LEARNED_SETTINGS.register("name", defaults={…})(Settings)`: what
the fleet file may give under `training.routing_evaluation.learned.<name>` (`config validate` checks it
there without importing the trainer), `defaults` what the pipeline runs it with where the file gives
nothing.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from routeforge.artifacts.common.extensions import Registry
from routeforge.core.config import StrictSettings
from routeforge.core.config.training import RoutingEvaluationSettings
from routeforge.core.kinds import learned_settings
from routeforge.training.policies.rl.export import export_policy
from routeforge.training.policies.rl.rollout import TrainerRun

LEARNED_POLICIES: Registry[LearnedPolicy] = Registry("learned policy", ("routeforge.training.policies.learned",))


@dataclass(frozen=True)
class Setting:
    """The fleet as the simulator sees it, and the evaluation's settings (`training.routing_evaluation`)."""

    profiles: list  # one InstanceProfile per instance
    models: list[int]  # each instance's model
    qos_limit: float  # 000's QoS latency per token
    accuracy: np.ndarray  # each instance's model's mean true quality (004's g_i)
    capacity_rps: float  # the sustainable Poisson rate of the fleet
    evaluation: RoutingEvaluationSettings
    block_tokens: int | None = None  # the instances' prefix-cache block (a block-id trace's); None: no cache


@dataclass
class TrainedPolicy:
    """A learned policy's trainer run (its network, curve, pretraining), with the environment it was
    trained in and what training cost."""

    name: str
    run: TrainerRun
    env: Any
    seconds: float
    budget: dict[str, Any]  # its trainer's settings section, as run

    def training(self) -> dict[str, Any]:
        """The report's `training` entry."""
        return {"seconds": self.seconds, "budget": self.budget, "episodes": len(self.run.curve),
                "kept_round": self.run.kept_round}


class LearnedPolicy(ABC):
    """One learned policy. `output`: the exported graph's output (`q_values`, `logits` or `bias`: an
    `artifacts.deciding.policy.ACTION_KINDS` entry, how the runtime acts on it)."""

    name: str = ""
    output: str = "logits"

    def settings(self, evaluation: RoutingEvaluationSettings) -> StrictSettings:
        """Its settings, the typed model its `settings.py` registered: the fleet file's
        `training.routing_evaluation.learned.<name>` over the budget registered with it
        (`core.kinds.learned_settings`)."""
        return learned_settings(self.name, evaluation.learned.get(self.name, {}))

    @abstractmethod
    def environment(self, setting: Setting, workload: Callable[[int], list]) -> Any:
        """The simulator environment it acts in, over `workload(seed)` episodes."""

    @abstractmethod
    def fit(self, setting: Setting, env, workload: Callable[[int], list],
            log: Callable[[str], None]) -> TrainerRun:
        """Its trainer's run (network, curve, pretraining, kept round), trained in `env` (a trainer that
        steps several copies builds them from `workload`)."""

    @abstractmethod
    def actor(self, network, seed: int, evaluation) -> Callable[[np.ndarray], Any]:
        """How the trained network acts in an evaluation episode."""

    def export_act(self, evaluation) -> str:
        """How a runtime should act on the exported graph's output (`greedy` or `sample`)."""
        return "greedy"

    def export(self, trained: TrainedPolicy, folder: Path, evaluation, seed: int) -> dict[str, Any]:
        """Write its ONNX graph and spec to `folder` (`artifacts.deciding.policy.RoutingPolicy` loads them) and
        check ONNX Runtime against PyTorch on observations of an episode of the environment it was
        trained in (`seed`), the cluster filling as it goes. Returns the spec with that parity."""
        env = trained.env
        obs, _ = env.reset(seed=seed)
        checks = [obs]
        discrete = hasattr(env.action_space, "n")
        for step in range(32):
            obs, _, done, _, _ = env.step(step % env.action_space.n if discrete
                                          else np.zeros(env.action_space.shape, dtype=np.float32))
            checks.append(obs)
            if done:
                break
        return export_policy(trained.run.network, folder, env.observation_spec(), env.action_spec(), np.stack(checks),
                             output=self.output, act=self.export_act(evaluation))

    def train(self, setting: Setting, workload: Callable[[int], list], log: Callable[[str], None]) -> TrainedPolicy:
        """Build its environment once, fit in it, and keep both with how training went."""
        start = time.perf_counter()
        env = self.environment(setting, workload)
        run = self.fit(setting, env, workload, log)
        return TrainedPolicy(self.name, run, env, round(time.perf_counter() - start, 1),
                             self.settings(setting.evaluation).model_dump(mode="json"))


def seeded(policy: LearnedPolicy, evaluation):
    """A policy's settings with the evaluation's seed."""
    return policy.settings(evaluation).model_copy(update={"seed": evaluation.seed})
