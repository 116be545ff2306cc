"""The settings of 004's PPO: `training.routing_evaluation.learned.ppo_queue_bias`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from routeforge.core.kinds import LEARNED_SETTINGS
from routeforge.training.policies.learned.settings import KeepBest


# started at join-shortest-queue (all-zero biases), the best round kept
@LEARNED_SETTINGS.register("ppo_queue_bias", defaults={
    "total_steps": 2048, "n_steps": 256, "batch_size": 64, "teacher": "shortest_queue", "demo_episodes": 2,
    "pretrain_steps": 300, "keep_best_round": True, "validation_episodes": 2})
class PpoSettings(KeepBest):
    """004's PPO (Stable-Baselines3)."""

    total_steps: int = 50_000  # slots (decisions) PPO trains for, over all environment copies
    hidden: tuple[int, ...] = (90, 60)  # widths of the policy and value networks' hidden layers (004: 90, 60)
    learning_rate: float = 3e-4  # Adam learning rate
    n_steps: int = Field(1024, description="slots collected per PPO update, over all environment copies")
    batch_size: int = 128  # slots per PPO minibatch
    n_epochs: int = 10  # passes over each rollout per PPO update
    gamma: float = 0.99  # discount factor of future rewards
    gae_lambda: float = 0.95  # lambda of generalized advantage estimation
    clip_range: float = 0.2  # PPO's clipping range of the probability ratio
    seed: int = 0  # seed of the networks and the training episodes
    n_envs: int = Field(1, ge=1, description="environment copies stepped together (each collects n_steps / n_envs "
                        "slots per update, so the update sees the same number of slots)")
    subprocess: bool = Field(False, description="step the copies in worker processes (SB3 SubprocVecEnv, forked): "
                             "the environment dominates 004's training time, so this uses the other core")
    # start from the best fixed routing distribution (`rl.slot_teacher`): none of the per-request
    # heuristics can be expressed by a per-slot distribution, and PPO from scratch scored below this
    # state-blind split (docs/results.md); its shares are searched on a grid of 1/teacher_resolution
    # steps per model, judged by the episode return on training-workload seeds, and the actor's
    # mean is fitted to it on `demo_episodes` of its observations for `pretrain_steps` updates
    # `shortest_queue`: for an environment with `dispatch: biased_shortest_queue`, all-zero biases
    # (join-shortest-queue exactly) on `demo_episodes` of its observations
    teacher: Literal["fixed_split", "shortest_queue"] | None = None
    # the fixed_split teacher's grid: shares in steps of 1/teacher_resolution per model
    teacher_resolution: int = Field(20, ge=1)
    # episodes of the teacher's observations the actor's mean is fitted on before PPO
    demo_episodes: int = Field(4, ge=1)
    pretrain_steps: int = Field(2000, ge=0)  # updates fitting the actor to the teacher before PPO
    # train on the reward less the teacher's on the same arrivals (`rl.paired_baseline`): an
    # episode's return is set mostly by its arrivals (~1,000 to ~19,000 in 004's benchmark), which
    # hid the gains of a few tenths of a percent that PPO started at the teacher has left to find;
    # needs a teacher, and costs a second simulation of every training episode
    paired_baseline: bool = False
    # seconds between two decisions of the biases (the environment's slot; `QueueStateBiasEnv.slot_s`)
    slot_s: float = Field(0.5, gt=0)
