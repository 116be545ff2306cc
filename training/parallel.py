"""Where the independent pieces of a heavy training step run: one after another in this process, or
as Ray tasks across a cluster's workers when the fleet's executor is `ray`.

The two pieces that parallelize are embedding (chunks of the texts the cache lacks) and
cross-validation (one task per candidate × fold). Both are pure functions of their arguments, so
the results are the same wherever they run, up to float rounding where a worker's BLAS uses a
different thread count (measured by `benchmarks/ray_parallel.py`).

A step opens the pool for its work (`with parallel_tasks(pool_for(config.execution)):`); the
library asks `current_pool()` and never needs to know which it got.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Protocol

import numpy as np


class Pool(Protocol):
    workers: int

    def map(self, fn: Callable[..., Any], calls: Sequence[tuple]) -> list[Any]: ...


class Serial:
    """Every call here, in order."""

    workers = 1

    def map(self, fn: Callable[..., Any], calls: Sequence[tuple]) -> list[Any]:
        return [fn(*args) for args in calls]


class RayTasks:
    """Each call a Ray task of `cpus` CPUs; results in call order. A NumPy array passed to several
    calls is put into the object store once. Connects to `address` (a GCS address, `auto`, or unset:
    inside a Ray job, the job's cluster) unless Ray is already initialized in this process."""

    def __init__(self, address: str | None = None, cpus: float = 1.0):
        import ray

        if not ray.is_initialized():
            try:
                ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
                         runtime_env={"env_vars": _forwarded_env()})
            except ValueError as exc:  # inside a Ray job: the job's runtime env already carries the step's
                if "runtime env" not in str(exc):
                    raise
                ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        self.cpus = cpus
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1) // cpus))

    def map(self, fn: Callable[..., Any], calls: Sequence[tuple]) -> list[Any]:
        import ray

        task = ray.remote(num_cpus=self.cpus)(fn)
        shared: dict[int, Any] = {}

        def ref(value):
            if isinstance(value, np.ndarray) and value.nbytes > 1 << 16:
                if id(value) not in shared:
                    shared[id(value)] = ray.put(value)
                return shared[id(value)]
            return value

        return ray.get([task.remote(*(ref(a) for a in args)) for args in calls])


def _forwarded_env() -> dict[str, str]:
    """What a worker needs to find the same encoder and caches as this process."""
    names = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "ROUTEFORGE_STATE", "ROUTEFORGE_ENCODER_BACKEND",
             "TRANSFORMERS_OFFLINE")
    return {n: os.environ[n] for n in names if n in os.environ}


_POOL: ContextVar[Pool | None] = ContextVar("routeforge_parallel_pool", default=None)


def current_pool() -> Pool:
    """The pool the running step opened, else this process alone."""
    return _POOL.get() or Serial()


@contextmanager
def parallel_tasks(pool: Pool) -> Iterator[Pool]:
    token = _POOL.set(pool)
    try:
        yield pool
    finally:
        _POOL.reset(token)


def pool_for(execution) -> Pool:
    """Ray tasks when the fleet's executor is `ray` (the step runs inside a Ray job and joins its
    cluster), else this process."""
    if getattr(execution, "executor", None) != "ray":
        return Serial()
    address = os.environ.get("RAY_ADDRESS")  # inside a Ray job: the cluster's GCS address
    return RayTasks("auto" if address is None or address.startswith("http") else address)


def chunks(n: int, parts: int, multiple: int = 1) -> list[slice]:
    """`n` items cut into at most `parts` contiguous slices, each a multiple of `multiple` long but
    the last (so a chunk holds whole encoder batches)."""
    size = max(multiple, -(-n // max(parts, 1)))
    size = -(-size // multiple) * multiple
    return [slice(start, min(start + size, n)) for start in range(0, n, size)]
