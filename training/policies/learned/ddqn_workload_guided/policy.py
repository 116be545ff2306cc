"""001's workload-guided double DQN: one instance per decision from the queue's state (paper 001)."""

from __future__ import annotations

from routeforge.training.policies.learned.base import LEARNED_POLICIES, LearnedPolicy, seeded
from routeforge.training.policies.learned.ddqn_workload_guided.training import train_ddqn
from routeforge.training.policies.rl.rollout import greedy
from routeforge.training.policies.simulator.workload_aware_env import WorkloadAwareEnv


class DdqnWorkloadGuided(LearnedPolicy):
    name, output = "ddqn_workload_guided", "q_values"

    def environment(self, setting, workload):
        ddqn = self.settings(setting.evaluation)
        return WorkloadAwareEnv(setting.profiles, workload, variant="guided", models=setting.models,
                                observe_waiting=ddqn.observe_waiting, observe_full=ddqn.mask_full,
                                block_tokens=setting.block_tokens,
                                observe_prefix=ddqn.observe_prefix and setting.block_tokens is not None,
                                observe_quality=ddqn.observe_quality, quality_reward=ddqn.quality_reward,
                                reward=ddqn.latency_reward,
                                # the router's scrapes as stale as the evaluation's heuristics see them
                                scrape_interval_s=getattr(setting.evaluation, "scrape_interval_s", 0.0))

    def fit(self, setting, env, workload, log):
        return train_ddqn(env, seeded(self, setting.evaluation), log=log)

    def actor(self, network, seed, evaluation):
        return greedy(network)  # the DDQN acts greedily on its Q values


LEARNED_POLICIES.register("ddqn_workload_guided", default=True)(DdqnWorkloadGuided())
