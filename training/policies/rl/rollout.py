"""Play a policy through a routing environment (any of the environments in `training.policies.simulator`)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np


def run_episode(env, act: Callable[[np.ndarray], object], seed: int) -> list:
    """Play one episode with `act` (observation → action); returns the outcome of every request."""
    obs, _ = env.reset(seed=seed)
    done = False
    while not done:
        obs, _, terminated, truncated, _ = env.step(act(obs))
        done = terminated or truncated
    return env.results()


def episode_return(env, act: Callable[[np.ndarray], int], seed: int, objective: str | None = None) -> float:
    """One episode's return with `act` (observation → action) in control, guidance off; with
    `objective`, the episode's sum of `info[objective]` instead of the reward's."""
    if hasattr(env, "set_episode"):
        env.set_episode(10_000)  # 001's decaying guidance weight, decayed away
    obs, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, info = env.step(act(obs))
        total, done = total + (reward if objective is None else info[objective]), terminated or truncated
    return total


def greedy(net) -> Callable[[np.ndarray], int]:
    """A network of Q values or action logits as a deterministic policy: its argmax."""
    import torch

    def act(obs: np.ndarray) -> int:
        with torch.no_grad():
            return int(net(torch.as_tensor(obs)).argmax())

    return act


def sampled(net, seed: int = 0) -> Callable[[np.ndarray], int]:
    """A network of action logits as a stochastic policy: an action drawn from softmax(logits), as
    SAC trains it (its argmax can be an action the policy takes only a minority of the time)."""
    import torch

    rng = np.random.default_rng(seed)

    def act(obs: np.ndarray) -> int:
        with torch.no_grad():
            probs = torch.softmax(net(torch.as_tensor(obs)), -1).numpy().astype(np.float64)
        return int(rng.choice(len(probs), p=probs / probs.sum()))

    return act


def training_seed(seed: int, episode: int) -> int:
    """The arrival seed of training episode `episode` of a run with seed `seed`. Episodes 0–99 keep
    seed·1000 + episode, the seeds every recorded run used; later ones move to 10⁹ + seed·10⁶ +
    episode. Before that split, runs longer than 101 episodes trained on seeds 101–103 (the
    benchmarks' evaluation seeds) and, past 500 episodes, on the teacher's demonstration and
    validation seeds (seed·1000 + 500…, + 800…, + 900…)."""
    return seed * 1000 + episode if episode < 100 else 10**9 + seed * 10**6 + episode


def validation_seeds(seed: int, episodes: int) -> list[int]:
    """Arrival seeds of the episodes a trainer judges its own rounds on: training workload, never a
    training episode's or the evaluation's."""
    return [seed * 1000 + 800 + i for i in range(episodes)]


def evaluation_seeds(seed: int, episodes: int) -> list[int]:
    """Arrival seeds of the pipeline's held-out evaluation episodes: clear of every training,
    demonstration and validation seed of any run seed below 10⁵ (they were seed + 1000…, which
    a run with seed 1 also trained on)."""
    return [5 * 10**8 + seed * 1000 + i for i in range(episodes)]


def play_round(envs: list, episodes: list[int], seed_of: Callable[[int], int],
               act: Callable[[np.ndarray], list[int]], after_step: Callable[[list[tuple]], None],
               budget: int | None = None) -> list[dict]:
    """Play episode `episodes[i]` on `envs[i]`, every copy stepped together: `act` maps the stacked
    observations of the copies still playing to their actions (one batched forward pass),
    `after_step` receives that step's transitions (observation, action, reward, next observation,
    done, terminated), and the round ends when every episode has, or after `budget` decisions in all.
    Returns per episode {episode, return, finished_at (decisions into the round; None if cut)}."""
    obs = [env.reset(seed=seed_of(k))[0] for env, k in zip(envs, episodes)]
    out = [{"episode": k, "return": 0.0, "finished_at": None} for k in episodes]
    active, decided = list(range(len(episodes))), 0
    while active and (budget is None or decided < budget):
        actions = act(np.stack([obs[i] for i in active]))
        rows, still = [], []
        for i, action in zip(active, actions):
            nxt, reward, terminated, truncated, _ = envs[i].step(action)
            done = terminated or truncated
            rows.append((obs[i], action, reward, nxt, done, terminated))
            obs[i] = nxt
            out[i]["return"] += reward
            if done:
                out[i]["finished_at"] = decided + len(rows)
            else:
                still.append(i)
        decided += len(rows)
        active = still
        after_step(rows)
    return out


def round_label(episodes: list[int]) -> str:
    """"episode 3" or "episodes 4–7", for the trainers' progress lines."""
    return f"episode {episodes[0]}" if len(episodes) == 1 else f"episodes {episodes[0]}–{episodes[-1]}"


def transitions(rows: list[tuple], n_actions: int, reward_scale: float = 1.0):
    """A TensorDict batch of (observation, action, reward, next observation, done, terminated) rows,
    actions one-hot, as TorchRL's losses read a replay buffer."""
    import torch
    from tensordict import TensorDict

    obs, action, reward, nxt, done, terminated = zip(*rows)
    return TensorDict({
        "observation": torch.as_tensor(np.stack(obs)),
        "action": torch.nn.functional.one_hot(torch.as_tensor(np.asarray(action, dtype=np.int64)), n_actions),
        "next": {"observation": torch.as_tensor(np.stack(nxt)),
                 "reward": torch.as_tensor(np.asarray(reward, dtype=np.float32)[:, None] * reward_scale),
                 "done": torch.as_tensor(np.asarray(done, dtype=bool)[:, None]),
                 "terminated": torch.as_tensor(np.asarray(terminated, dtype=bool)[:, None])},
    }, batch_size=[len(rows)])


@dataclass
class TrainerRun:
    """What an RL trainer returns (`train_ddqn`, `train_sac`, `train_ppo`)."""

    network: Any  # the trained network, in eval mode (PPO: its mean actor)
    settings: dict[str, Any]  # the trainer's settings, as run
    curve: list[dict[str, Any]]  # one point per episode: return, steps, loss where there is one
    pretrain: dict[str, Any] = field(default_factory=dict)  # cloning from the teacher; empty without one
    curve_return: str = "return"  # what the curve's return is (paired baseline: less the teacher's)
    train_seconds: float | None = None
    kept_round: dict[str, Any] | None = None  # `keep_best_round`: the round whose weights were kept
    validation: list[dict[str, Any]] = field(default_factory=list)  # every round's validation score

    def summary(self) -> dict[str, Any]:
        """Everything but the network: what a benchmark's JSON keeps of the run."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "network"}


class BestRound:
    """`keep_best_round`: the trainer offers its weights after pretraining and after every round of
    episodes; the ones whose policy (`policy(net)`, the way the trainer's policy routes) scores the
    highest mean on fixed validation episodes (`validation_seeds`, on a copy of the environment) are
    the ones returned. Training returns would compare rounds on different arrivals and with
    exploration; the pretrained candidate means RL must beat its own starting point to be kept
    (000's SAC lost its clone's level, 001's long DQN runs collapsed after holding it).

    The score is the episode's return, or the environment's own objective where it names one
    (`env.objective`, a key of the step's info): 000's reward subtracts an estimate of the QoS a
    routing puts at risk, a shaping term the evaluation never counts, so its rounds are judged by
    the QoS they deliver."""

    def __init__(self, env, seed: int, episodes: int, policy: Callable[[object], Callable[[np.ndarray], int]]):
        self.judge, self.seeds, self.policy = copy.deepcopy(env), validation_seeds(seed, episodes), policy
        self.metric: str | None = getattr(env, "objective", None)
        self.validation: list[dict] = []
        self.kept: dict | None = None
        self._weights = None

    def offer(self, net, log: Callable[[str], None], first_episode: int | None, steps: int) -> None:
        """Judge `net` as it is now (`first_episode` None: the pretrained weights)."""
        score = float(np.mean([episode_return(self.judge, self.policy(net), s, self.metric) for s in self.seeds]))
        self.validation.append({"first_episode": first_episode, "steps": steps, "validation_score": score,
                                "metric": self.metric or "return"})
        best = self.kept is None or score > self.kept["validation_score"]
        log(f"  validation {self.metric or 'return'} {score:.1f}" + (" (best so far)" if best else ""))
        if best:
            self.kept, self._weights = self.validation[-1], copy.deepcopy(net.state_dict())

    def restore(self, net, run: TrainerRun, log: Callable[[str], None]) -> None:
        """Load the kept weights into `net`; record them and every round's validation in `run`."""
        if self.kept is None:
            return
        net.load_state_dict(self._weights)
        run.kept_round, run.validation = self.kept, self.validation
        where = ("the pretrained weights" if self.kept["first_episode"] is None
                 else f"the weights after episodes from {self.kept['first_episode']}")
        log(f"kept {where} (validation {self.kept['metric']} {self.kept['validation_score']:.1f}, "
            f"{self.kept['steps']} steps)")
