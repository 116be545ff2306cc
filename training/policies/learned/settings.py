"""What the learned policies' settings share: which weights a trainer returns (`KeepBest`), and the
teacher a trainer starts from (`FromTeacher`). Each policy's own settings model is in its folder
(`<policy>/settings.py`, registered in `core.kinds.LEARNED_SETTINGS`); a fleet file gives them by the policy's name
under `training.routing_evaluation.learned`, and benchmarks build them the same way."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
from routeforge.artifacts.deciding.heuristics import HEURISTICS
from routeforge.core.config.base import OneOf, _Strict

# a heuristic registered as a teacher (`teaches=` where it is registered, artifacts.deciding.heuristics), its simulator
# variant `route_balance_absolute`, or `auto`
TeacherName = Annotated[str, OneOf(HEURISTICS, extra=("auto", "route_balance_absolute"), where="teaches")]


class KeepBest(_Strict):
    """What every trainer shares: which of its weights it returns."""

    # return the pretrained weights or those at the end of the round of episodes (PPO: the rollout)
    # whose policy scores best on `validation_episodes` fixed episodes of the training workload, not
    # the last ones (`rollout.BestRound`; the score is the return, or the environment's objective
    # where it names one: 000's delivered QoS): 001's DQN at 10^6 decisions with margin_floor 0.2
    # held the teacher's level for ~800k decisions and then collapsed, and 000's SAC lost its
    # clone's QoS in RL (docs/results.md); the validation seeds are neither training nor evaluation seeds
    keep_best_round: bool = False
    validation_episodes: int = Field(2, ge=1)  # fixed episodes each round is scored on (keep_best_round)


class FromTeacher(KeepBest):
    """What the DQN and SAC trainers share: the teacher they start from and how many environment
    copies they step together."""

    # start from a heuristic (training.policies.rl.teacher): "auto" (the best of JSQ, earliest
    # available, least work left and RouteBalance, 002's and unscaled, on training seeds; where the
    # instances cache prompt blocks, llm-d's, Dynamo's and SGLang's routers too), one of them, or None
    # (from scratch)
    teacher: TeacherName | None = "auto"
    demo_episodes: int = 4  # episodes of the teacher's decisions cloned before RL
    demo_noise: float = 0.1  # share of random actions while demonstrating (states off the teacher's path)
    # environment copies stepped together (one batched forward pass per step; rounds of n_envs episodes)
    n_envs: int = Field(1, ge=1)
    # how "auto" picks the teacher: by the heuristics' own episode returns, or by the returns of this
    # trainer's network cloned from each (cross-entropy on its demonstrations, as many updates as the
    # trainer's cloning gets): a teacher the observation cannot express (RouteBalance reads context
    # tokens 001's observation does not show) is then not chosen for a lead its imitation cannot keep
    teacher_choice: Literal["return", "clone"] = "return"
