"""000's SAC over the QoS graph: a heterogeneous graph attention network (`sac_qos_han`) and its MLP
ablation (`sac_qos_mlp`), both trained against a paired heuristic baseline (paper 000)."""

from __future__ import annotations

from routeforge.training.policies.learned.base import LEARNED_POLICIES, LearnedPolicy, seeded
from routeforge.training.policies.learned.sac_qos.training import train_sac
from routeforge.training.policies.rl.rollout import greedy, sampled
from routeforge.training.policies.simulator.qos_graph_env import QosGraphEnv


class SacQos(LearnedPolicy):
    output = "logits"

    def __init__(self, name: str, variant: str):
        self.name, self.variant = name, variant

    def environment(self, setting, workload):
        return QosGraphEnv(setting.profiles, setting.models, workload, setting.qos_limit, variant=self.variant,
                           pad=setting.evaluation.queue_capacity, block_tokens=setting.block_tokens)

    def fit(self, setting, env, workload, log):
        return train_sac(env, seeded(self, setting.evaluation), log=log)

    def actor(self, network, seed, evaluation):
        # SAC acts as it was trained, by sampling (or greedily where the fleet says so)
        return sampled(network, seed) if self.settings(evaluation).act == "sample" else greedy(network)

    def export_act(self, evaluation) -> str:
        return self.settings(evaluation).act


LEARNED_POLICIES.register("sac_qos_han", default=True)(SacQos("sac_qos_han", "han"))
LEARNED_POLICIES.register("sac_qos_mlp", default=True)(SacQos("sac_qos_mlp", "baseline"))
