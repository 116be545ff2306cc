"""`toy_clone`: an MLP fitted to a heuristic's decisions in the workload-aware environment; it acts
greedily on its logits, which the runtime's `discrete` action reads as it reads every such policy's."""

from __future__ import annotations

import numpy as np
from routeforge.training.policies.learned.base import LEARNED_POLICIES, LearnedPolicy, seeded
from routeforge.training.policies.rl.networks import mlp
from routeforge.training.policies.rl.rollout import TrainerRun, episode_return, greedy
from routeforge.training.policies.rl.teacher import demonstrate, fit_clone
from routeforge.training.policies.simulator.workload_aware_env import WorkloadAwareEnv


class ToyClone(LearnedPolicy):
    name, output = "toy_clone", "logits"

    def environment(self, setting, workload):
        return WorkloadAwareEnv(setting.profiles, workload, variant="aware", models=setting.models,
                                observe_waiting=True, block_tokens=setting.block_tokens)

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
