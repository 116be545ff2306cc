"""Step-wise control of a simulated cluster, one routing decision at a time (what RL needs).

`head()` is the request at the front of the router queue (time moves to the next arrival when the
queue is empty); `act(choice)` routes it to an instance, drops it, or (WAIT) lets
`decision_interval_s` pass with it still queued. Completions since the previous call are returned
so an environment can turn them into rewards.
"""

from __future__ import annotations

import math
from collections import deque

from routeforge.training.policies.simulator.cluster import DROP, WAIT, Cluster, Outcome, Request
from routeforge.training.policies.simulator.instance import Job


class Stepper:
    def __init__(self, cluster: Cluster, requests: list[Request], decision_interval_s: float = 0.02,
                 max_queue_s: float = 60.0):
        self.cluster = cluster
        self.arrivals = sorted(requests, key=lambda r: r.arrival)
        self.dt = decision_interval_s
        self.max_queue_s = max_queue_s
        self.queue: deque[Request] = deque()
        self.outcomes: dict[int, Outcome] = {}
        self.t = 0.0
        self._next = 0
        self._seen = [0] * len(cluster.instances)

    def _advance(self, t: float) -> None:
        self.cluster.advance(t)
        self.t = max(self.t, t)
        while self._next < len(self.arrivals) and self.arrivals[self._next].arrival <= self.t:
            self.queue.append(self.arrivals[self._next])
            self._next += 1
        while self.queue and self.t - self.queue[0].arrival > self.max_queue_s:
            req = self.queue.popleft()
            self.outcomes[req.rid] = Outcome(req, DROP, None, None, "timed out in the router queue")

    def head(self) -> Request | None:
        """The request to decide next, or None once every request has arrived and left the queue."""
        while not self.queue and self._next < len(self.arrivals):
            self._advance(self.arrivals[self._next].arrival)
        return self.queue[0] if self.queue else None

    def act(self, choice: int | None) -> list[Job]:
        """Apply a decision for `head()`; returns the jobs that finished (or were rejected) since the
        previous call."""
        req = self.head()
        if req is None:
            raise RuntimeError("no request to decide: the episode is over")
        if choice is WAIT:
            self._advance(self.t + self.dt)
        else:
            self.queue.popleft()
            self.outcomes[req.rid] = self.cluster.route(req, choice, self.t)
        if self.head() is None:
            self._advance(math.inf)
        return self._finished()

    def _finished(self) -> list[Job]:
        out = []
        for i, inst in enumerate(self.cluster.instances):
            out += inst.done[self._seen[i]:]
            self._seen[i] = len(inst.done)
        for job in out:
            if job.rejected:
                self.outcomes[job.rid].reason = job.rejected
        return out

    @property
    def n_arrived(self) -> int:
        """How many requests have arrived so far (`arrivals[:n_arrived]`, in arrival order)."""
        return self._next

    @property
    def over(self) -> bool:
        return self.head() is None

    def results(self) -> list[Outcome]:
        return [self.outcomes[r.rid] for r in self.arrivals if r.rid in self.outcomes]
