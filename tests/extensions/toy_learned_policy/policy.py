"""`toy_clone`: an MLP fitted to a heuristic's decisions in the workload-aware environment's dynamics,
observing its own `toy_load` observation (`observation.py`); it acts greedily on its logits, which the
runtime's `discrete` action reads as it reads every such policy's."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from routeforge.training.policies.learned.base import LEARNED_POLICIES, LearnedPolicy, seeded
from routeforge.training.policies.rl.networks import mlp
from routeforge.training.policies.rl.rollout import TrainerRun, episode_return, greedy
from routeforge.training.policies.rl.teacher import demonstrate, fit_clone
from routeforge.training.policies.simulator.policy_environments import POLICY_ENVIRONMENTS
from routeforge.training.policies.simulator.workload_aware_env import WorkloadAwareEnv

from tests.extensions.toy_learned_policy.observation import KIND, observation_toy_load


class ToyLoadEnv(WorkloadAwareEnv):
    """The workload-aware environment (one request at a time, no wait action) observing `toy_load`."""

    def __init__(self, profiles, workload, models, block_tokens=None):
        super().__init__(profiles, workload, variant="aware", models=models, wait_action=False,
                         block_tokens=block_tokens)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(1 + 2 * self.m,), dtype=np.float32)

    def observation_spec(self) -> dict:
        return {"kind": KIND, "size": 1 + 2 * self.m, "instances": self.m,
                "actions": [f"route to instance {i}" for i in range(self.m)]}

    def _observe(self) -> np.ndarray:
        req, router = self.stepper.head(), self.stepper.cluster.router(self.stepper.t)
        return observation_toy_load(req.prompt_tokens if req else 0, router.instances())


@POLICY_ENVIRONMENTS.register(KIND)
def _from_spec(spec, profiles, models, workload, block_tokens):
    return ToyLoadEnv(profiles, workload, models, block_tokens)


class ToyClone(LearnedPolicy):
    name, output = "toy_clone", "logits"

    def environment(self, setting, workload):
        return ToyLoadEnv(setting.profiles, workload, setting.models, setting.block_tokens)

    def fit(self, setting, env, workload, log):
        import torch

        settings = seeded(self, setting.evaluation)
        torch.manual_seed(settings.seed)
        demos = demonstrate(env, settings.teacher, settings.demo_episodes, settings.seed)
        net = mlp(env.observation_space.shape[0], env.action_space.n, (settings.hidden, settings.hidden))
        fit_clone(net, demos, settings.steps, settings.learning_rate, 256, np.random.default_rng(settings.seed))
        net.eval()
        clone = episode_return(env, greedy(net), seed=settings.seed + 10_000)
        log(f"toy_clone: {len(demos)} decisions of {settings.teacher} cloned in {settings.steps} steps")
        return TrainerRun(net, settings.model_dump(mode="json"), [{"episode": 0, "steps": len(demos), "return": clone}],
                          pretrain=demos.summary(net, settings.teacher, {}, 0.0))

    def actor(self, network, seed, evaluation):
        return greedy(network)


LEARNED_POLICIES.register("toy_clone", default=False)(ToyClone())
