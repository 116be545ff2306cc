"""Teachers for the learned routing policies: the best non-learned policy of a setting, acting inside
the RL environment, and the demonstrations it gives.

Why: trained from scratch at a budget this machine affords, 001's DQN and 000's SAC lose to
join-shortest-queue (docs/results.md). Starting them from the best heuristic's behaviour
(behaviour cloning on its demonstrations) and fine-tuning with a decaying pull toward it (DQfD's
large-margin loss for the DQN, a behaviour-cloning term for SAC) puts a learned policy at the
teacher's level from the first episode; RL then has to earn anything above it, and the routing
gate (`training.policies.gate`) decides whether it did.

The teacher is chosen by evaluation among join-shortest-queue, earliest available, least work
left and RouteBalance's joint assignment (002's min–max-scaled quality, then unscaled): each plays
episodes of the training workload (training seeds, never the evaluation's) in the environment, and
the one with the highest episode return, the quantity RL maximises, with any guidance term switched
off, teaches; a rule listed later (more complex) must beat the simpler choice by more than the seed
noise to displace it. A heuristic's own return overstates what a network that cannot see what it
reads will start from: optionally (the DQN's `teacher_choice: clone`) each candidate is judged by the
return of a clone the student's network learns from its demonstrations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from routeforge.artifacts.deciding.heuristics import HEURISTICS
from routeforge.training.policies.rl.rollout import episode_return, greedy
from routeforge.training.policies.simulator.baselines import BASELINES, VARIANTS


def teachers(kind: str = "load") -> tuple[str, ...]:
    """The heuristics registered as teachers of `kind` (`teaches=` where each is registered,
    `artifacts.deciding.heuristics`), simplest first (`teacher_order`), each followed by its simulator variants
    (`route_balance_absolute`: RouteBalance with unscaled quality estimates, 000's best heuristic).
    "load": every setting; "prefix": the deployed routers, which teach where instances cache prompt
    blocks (their prefix scorers have nothing to read elsewhere, and each candidate costs a clone and
    three episodes)."""
    entries = sorted((e for e in HEURISTICS.entries() if e.metadata.get("teaches") == kind),
                     key=lambda e: (e.metadata.get("teacher_order", 0), e.name))
    return tuple(n for e in entries for n in (e.name, *(v for v, base in VARIANTS.items() if base == e.name)))


def candidates_for(env) -> tuple[str, ...]:
    """The teachers `auto` chooses among in `env`: the load teachers, and the prefix ones where its
    instances cache prompt blocks."""
    return teachers("load") + (teachers("prefix") if getattr(env, "block_tokens", None) else ())


def pull_weight(weight: float, decay: float, episode: int, floor: float = 0.0) -> float:
    """The weight of the pull toward the teacher during RL in episode `episode` (DQfD's margin loss
    for the DQN, the behaviour-cloning term for SAC): weight · decay^episode, never below `floor`.
    DQfD keeps the pull for the whole run; without a floor, 001's long DDQN run collapsed once it
    had faded (docs/results.md)."""
    return max(floor, weight * decay ** episode)


def teacher_action(env, policy) -> int:
    """The environment action `policy` (a simulator baseline) takes for the request at the head of
    the router queue, in the state the environment is in."""
    stepper = env.stepper
    head = stepper.head()
    choice = policy.assign([head], stepper.cluster.handed_to(policy, stepper.t), stepper.t)[0]
    return env.action_for(choice)


def teacher_return(env, name: str, seed: int) -> float:
    """One episode's return with the teacher acting (guidance off)."""
    policy = BASELINES[name]()
    return episode_return(env, lambda _obs: teacher_action(env, policy), seed)


@dataclass(frozen=True)
class Student:
    """What `choose_teacher(student=...)` needs to judge a teacher by its imitation: a fresh network of
    the student's architecture (observation → one output per action) and the cloning budget."""

    make_net: Callable[[], object]
    demo_episodes: int = 4
    steps: int = 1000
    seed: int = 0
    learning_rate: float = 1e-3
    batch_size: int = 512


def clone_return(env, name: str, student: Student, seeds: tuple[int, ...]) -> np.ndarray:
    """The episode returns on `seeds` of a fresh student network trained by cross-entropy to take
    `name`'s action on its demonstrations, acting greedily: what the student can actually start from
    with this teacher, which is the teacher's own return only where the observation shows what the
    teacher reads (RouteBalance reads context tokens that 001's observation does not carry)."""
    import torch

    with torch.random.fork_rng(devices=[]):  # the caller's generator state is left as it was
        torch.manual_seed(student.seed)
        demos = demonstrate(env, name, student.demo_episodes, student.seed)
        net = student.make_net()
        fit_clone(net, demos, student.steps, student.learning_rate, student.batch_size,
                  np.random.default_rng(student.seed))
    act = greedy(net.eval())
    return np.array([episode_return(env, act, s) for s in seeds])


def fit_clone(net, demos: Demonstrations, steps: int, learning_rate: float, batch_size: int,
              rng: np.random.Generator) -> None:
    """`steps` Adam updates of `net` (observation → one output per action) by cross-entropy toward
    the teacher's action on random batches of `demos`."""
    import torch

    obs, expert = torch.as_tensor(demos.observation), torch.as_tensor(demos.expert)
    optim = torch.optim.Adam(net.parameters(), lr=learning_rate)
    for _ in range(steps):
        idx = torch.as_tensor(rng.integers(len(expert), size=min(batch_size, len(expert))))
        loss = torch.nn.functional.cross_entropy(net(obs[idx]), expert[idx])
        optim.zero_grad()
        loss.backward()
        optim.step()


def choose_teacher(env, candidates: tuple[str, ...] | None = None, seeds: tuple[int, ...] = (0, 1, 2),
                   log: Callable[[str], None] = print, student: Student | None = None) -> tuple[str, dict[str, float]]:
    """(the teacher, every candidate's mean episode return on `seeds`). Candidates are listed simplest
    first; walking the list, a candidate replaces the current choice only when its mean return is
    higher by more than the seed noise of the paired difference (std over seeds; both play the same
    arrivals). A rule that is not reliably better does not displace a simpler one, which a network
    also imitates more faithfully. With `student`, the returns compared are those of the student's
    clone of each candidate (`clone_return`), not the candidate's own."""
    candidates = teachers("load") if candidates is None else candidates
    if student is None:
        returns = {name: np.array([teacher_return(env, name, s) for s in seeds]) for name in candidates}
    else:
        returns = {name: clone_return(env, name, student, seeds) for name in candidates}
    chosen = candidates[0]
    for name in candidates[1:]:
        diff = returns[name] - returns[chosen]
        if diff.mean() > diff.std():
            chosen = name
    scores = {name: float(r.mean()) for name, r in returns.items()}
    best = max(scores, key=scores.get)
    what = "mean episode return of the student's clone" if student is not None else "mean episode return"
    log(f"teacher candidates ({what}): " + ", ".join(f"{k} {v:.1f}" for k, v in scores.items())
        + f"; {chosen} teaches" + (f" ({best} is not better beyond the seed noise)" if chosen != best else ""))
    return chosen, scores


@dataclass
class Demonstrations:
    """Transitions played with the teacher in control (with probability `noise` a random action is
    taken instead, so the states off the teacher's path are seen too), each labelled with the action
    the teacher would take in its state."""

    observation: np.ndarray
    action: np.ndarray  # taken
    reward: np.ndarray
    next_observation: np.ndarray
    done: np.ndarray
    terminated: np.ndarray
    expert: np.ndarray  # the teacher's action in the state

    def __len__(self) -> int:
        return len(self.action)

    def transitions(self):
        """(observation, action, reward, next observation, done, terminated) per step, for a replay buffer."""
        return zip(self.observation, self.action, self.reward, self.next_observation, self.done, self.terminated)

    def summary(self, net, teacher: str, teacher_returns: dict, seconds: float) -> dict:
        """What pretraining achieved: how often `net`'s highest output is the teacher's action."""
        import torch

        with torch.no_grad():
            top = net(torch.as_tensor(self.observation)).argmax(1).numpy()
        return {"teacher": teacher, "teacher_returns": teacher_returns, "demonstrations": len(self),
                "agreement_with_teacher": float(np.mean(top == self.expert)), "seconds": seconds}


def demonstrate(env, name: str, episodes: int, seed: int, noise: float = 0.1) -> Demonstrations:
    rng = np.random.default_rng(seed)
    rows: list[tuple] = []
    for k in range(episodes):
        policy = BASELINES[name]()
        if hasattr(env, "set_episode"):
            env.set_episode(k)
        obs, _ = env.reset(seed=seed * 1000 + 500 + k)
        done = False
        while not done:
            expert = teacher_action(env, policy)
            action = int(rng.integers(env.action_space.n)) if rng.random() < noise else expert
            nxt, reward, terminated, truncated, _ = env.step(action)
            done = terminated or truncated
            rows.append((obs, action, reward, nxt, done, terminated, expert))
            obs = nxt
    cols = list(zip(*rows))
    return Demonstrations(np.stack(cols[0]).astype(np.float32), np.array(cols[1]), np.array(cols[2], np.float32),
                          np.stack(cols[3]).astype(np.float32), np.array(cols[4]), np.array(cols[5]),
                          np.array(cols[6]))


def resolve_teacher(env, teacher: str | None, seed: int, log: Callable[[str], None],
                    student: Student | None = None) -> tuple[str | None, dict]:
    """`teacher`: None (no teacher), "auto" (chosen by `choose_teacher` on training seeds, by the
    teachers' returns or, with `student`, by their clones') or a name."""
    if teacher is None:
        return None, {}
    if teacher == "auto":
        return choose_teacher(env, candidates_for(env), seeds=tuple(seed * 1000 + 900 + i for i in range(3)), log=log,
                              student=student)
    known = teachers("load") + teachers("prefix")
    if teacher not in known:
        raise ValueError(f"teacher {teacher!r}: expected auto or one of {list(known)}")
    return teacher, {}
