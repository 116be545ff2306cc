"""The settings of 001's double DQN: `training.routing_evaluation.learned.ddqn_workload_guided`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from routeforge.core.kinds import LEARNED_SETTINGS
from routeforge.training.policies.learned.settings import FromTeacher


@LEARNED_SETTINGS.register("ddqn_workload_guided", defaults={"episodes": 6})
class DdqnSettings(FromTeacher):
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
