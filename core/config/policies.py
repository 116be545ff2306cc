"""Settings of the RL trainers (`training/policies/rl/`): part of the one fleet schema, so a fleet
file sets them under `training.routing_evaluation.{ddqn,sac}` and benchmarks build them the same way."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from routeforge.core.config.base import _Strict

TeacherName = Literal["auto", "join_shortest_queue", "earliest_available", "least_work_left", "route_balance",
                      "route_balance_absolute", "llm_d", "dynamo_kv", "sglang_cache_aware"]


class _KeepBest(_Strict):
    """What every trainer shares: which of its weights it returns."""

    # return the pretrained weights or those at the end of the round of episodes (PPO: the rollout)
    # whose policy scores best on `validation_episodes` fixed episodes of the training workload, not
    # the last ones (`rollout.BestRound`; the score is the return, or the environment's objective
    # where it names one: 000's delivered QoS): 001's DQN at 10^6 decisions with margin_floor 0.2
    # held the teacher's level for ~800k decisions and then collapsed, and 000's SAC lost its
    # clone's QoS in RL (docs/results.md); the validation seeds are neither training nor evaluation seeds
    keep_best_round: bool = False
    validation_episodes: int = Field(2, ge=1)  # fixed episodes each round is scored on (keep_best_round)


class _FromTeacher(_KeepBest):
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


class DdqnSettings(_FromTeacher):
    """001's double DQN."""

    episodes: int = 10  # RL episodes after the teacher's demonstrations
    gamma: float = 0.99  # discount factor of future rewards
    learning_rate: float = 1e-3  # Adam learning rate
    batch_size: int = 512  # transitions per gradient step
    buffer_size: int = 100_000  # replay buffer capacity, in transitions
    hidden: tuple[int, int] = (64, 64)  # widths of the Q network's two hidden layers (001: 64, 64)
    eps_start: float = 1.0  # initial share of random actions (epsilon-greedy exploration)
    eps_end: float = 0.05  # final share of random actions (epsilon-greedy exploration)
    eps_decay_steps: int = 20_000  # decisions over which epsilon falls linearly from eps_start to eps_end
    learn_every: int = 4  # decisions between two gradient steps
    warmup_steps: int = 1_000  # decisions collected before the first gradient step
    target_tau: float = 0.005  # Polyak factor of the target network's soft update per gradient step
    reward_scale: float = 0.01  # +60 per completion makes Q values of thousands: learn on a smaller scale
    # "mlp": 001's obs-64-64-actions; "per_instance": one Q head shared by every instance
    # (ddqn_workload_guided/model.py), for environments whose observation is global + per-instance rows
    network: Literal["mlp", "per_instance"] = "mlp"
    # with a teacher: behaviour cloning on its demonstrations (TD + DQfD's large-margin loss), then
    # the margin loss during RL, weighted max(margin_floor, margin_weight · margin_decay^episode);
    # DQfD itself keeps the weight constant (margin_decay 1); a floor keeps the policy tied to the
    # teacher once the decayed pull would have faded (without one, 001's long run collapsed)
    pretrain_steps: int = 2000
    margin: float = 0.8  # DQfD's large-margin loss: the margin the teacher's action must lead the others' Q values by
    margin_weight: float = 1.0  # the margin loss's weight in the first RL episode
    margin_decay: float = 0.8  # factor on the margin loss's weight per episode (1: constant, as in DQfD)
    # the margin loss's weight never falls below this (keeps the policy tied to its teacher)
    margin_floor: float = Field(0.0, ge=0.0)
    # the aware / guided observation also shows each instance's waiting requests (001's shows running
    # ones only, so a request queued behind a full batch is invisible and JSQ cannot be imitated);
    # false gives 001's 27 values
    observe_waiting: bool = True
    # a departure from 001: each instance's row also says whether its waiting queue is full, and the
    # network's Q value for routing there is masked (a request sent to a full queue is rejected: the
    # unmasked DDQN rejected a fifth of the reference fleet's requests); exported in the ONNX graph
    mask_full: bool = True
    # a departure from 001: each instance's row also shows the share of the request's prompt blocks it
    # caches (only where the trace carries block ids, Mooncake's format, so instances cache blocks)
    observe_prefix: bool = True
    # a departure from 001: each instance's row also shows the request's predicted quality on the
    # instance's model, so choosing the instance chooses the model (RouteBalance's joint decision, 002)
    observe_quality: bool = False
    # each completion also earns this weight × its true quality on the model that served it
    quality_reward: float = Field(0.0, ge=0.0, allow_inf_nan=False)
    # the latency each request is charged: its E2E at completion (001's, with +60 per completion), or
    # its TTFT when its first token comes (what prefix-cache-aware routers are judged by)
    latency_reward: Literal["completion", "first_token"] = "completion"
    # judged by the clone's return: in 001's setting RouteBalance's own return leads JSQ's, but
    # the network imitates it in a third of the states and JSQ in two thirds (docs/results.md)
    teacher_choice: Literal["return", "clone"] = "clone"
    seed: int = 0  # seed of the networks, the exploration and the training episodes


class SacSettings(_FromTeacher):
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
    # actor-only cross-entropy updates before those joint ones: a HAN actor update costs ~20 ms, a
    # joint one with the twin critics ~120 ms, and 1,000 joint updates left the HAN agreeing with
    # JSQ in 43% of the demonstration states (docs/results.md)
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


class PpoSettings(_KeepBest):
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
