"""004's PPO over a bias per instance for join-shortest-queue, observing what vLLM's /metrics show
(paper 004): the one learned policy a live router can run (`artifacts.deciding.dispatch`)."""

from __future__ import annotations

from routeforge.training.policies.learned.base import LEARNED_POLICIES, LearnedPolicy, seeded
from routeforge.training.policies.learned.ppo_queue_bias.training import bias_policy, train_ppo
from routeforge.training.policies.simulator.queue_state_env import QueueStateBiasEnv


class PpoQueueBias(LearnedPolicy):
    name, output = "ppo_queue_bias", "bias"

    def environment(self, setting, workload):
        e = setting.evaluation
        return QueueStateBiasEnv(setting.profiles, setting.models, setting.accuracy, workload,
                                 rate_scale_rps=setting.capacity_rps, slo_scale=e.slo_scale,
                                 slot_s=self.settings(e).slot_s, slo_reference=e.slo_reference,
                                 block_tokens=setting.block_tokens)

    def fit(self, setting, env, workload, log):  # PPO steps fresh copies of its environment
        settings = seeded(self, setting.evaluation)
        return train_ppo(lambda: self.environment(setting, workload), settings, log=log)

    def actor(self, network, seed, evaluation):
        return bias_policy(network)


LEARNED_POLICIES.register("ppo_queue_bias", default=False)(PpoQueueBias())
