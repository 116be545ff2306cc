"""The settings of 000's discrete SAC: `training.routing_evaluation.learned.sac_qos_han` and `.sac_qos_mlp`
(each its own)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from routeforge.core.kinds import LEARNED_SETTINGS
from routeforge.training.policies.learned.settings import FromTeacher


class SacSettings(FromTeacher):
    """000's discrete SAC."""

    total_steps: int = 20_000  # decisions SAC trains for
    gamma: float = 0.99  # discount factor of future rewards
    learning_rate: float = 3e-4  # Adam learning rate of the actor, the critics and the temperature
    batch_size: int = 64  # transitions per gradient step
    buffer_size: int = 100_000  # replay buffer capacity, in transitions
    warmup_steps: int = 500  # decisions collected before the first gradient step
    learn_every: int = 4  # decisions between two gradient steps
    target_tau: float = 0.005  # Polyak factor of the target critics' soft update
    # the temperature aims at this share of the uniform policy's entropy (TorchRL's default 0.98 keeps
    # a 7-action policy near uniform, and its greedy action is then a coin flip)
    target_entropy_weight: float = 0.5
    hidden: int = 64  # width of the networks' hidden layers
    heads: int = 4  # attention heads of the HAN actor and critics
    # with a teacher: the actor cloned by cross-entropy on its demonstrations, then during RL a
    # behaviour-cloning term max(bc_floor, bc_weight · bc_decay^episode) pulls toward it (the DQN's
    # schedule, `teacher.pull_weight`)
    pretrain_steps: int = 1000
    # actor-only cross-entropy updates before those joint ones: an actor update costs a fraction of a
    # joint one with the twin critics, and joint updates alone left the HAN far from its teacher
    # (docs/results.md)
    clone_steps: int = Field(0, ge=0)
    bc_weight: float = 1.0  # the behaviour-cloning weight in the first RL episode
    bc_decay: float = 0.8  # factor on the behaviour-cloning weight per episode
    bc_floor: float = Field(0.0, ge=0.0)  # the behaviour-cloning weight never falls below this
    # the entropy temperature's start (TorchRL's default 1.0). Tried 0.05 with a teacher, to keep the
    # cloned actor near-deterministic: the actor then followed the critic's errors and episode returns
    # fell far below the teacher's within two episodes (docs/results.md)
    alpha_init: float = 1.0
    # train on the reward less the teacher's on the same arrivals (`rl.paired_baseline`; needs a
    # teacher): the share of each reward the arrivals decide cancels, as it did for 004's PPO
    paired_baseline: bool = False
    # how the trained actor routes: "sample" from its distribution (as SAC trains it) or "greedy"
    # (its most probable action); recorded in the exported policy.json as `act`
    act: Literal["sample", "greedy"] = "sample"
    seed: int = 0  # seed of the networks and the training episodes


# one model, each policy its own settings (the HAN and its MLP ablation)
for _name in ("sac_qos_han", "sac_qos_mlp"):
    LEARNED_SETTINGS.register(_name, defaults={"total_steps": 4000})(SacSettings)
