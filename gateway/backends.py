"""The gateway's backends: what each serves, whether it is up, and its latest `/metrics` scrape.

Each backend is one instance of the bundle's simulated fleet (its tier's step fit is what the
dispatcher predicts with). A background task per backend scrapes `/metrics` every `scrape_interval_s`
(vLLM's gauges: running, waiting, KV use, prefix-cache counters; a scrape that times out leaves the
last one standing: a busy CPU server renders it slowly); a backend that refuses the connection, or
times out on a request, is marked down, and re-probed (`/health`, then `/v1/models`) every
`probe_interval_s` until it answers. A backend without vLLM's gauges (another OpenAI-compatible
server) is described by the gateway's own in-flight requests to it, as a scrape taken now.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import aiohttp
from routeforge.artifacts.deciding.dispatch import LiveState

log = logging.getLogger("routeforge.gateway")
DOWN_WAITING = 10_000.0  # a down backend's state: saturated, so load-aware policies steer clear before `among` does


class BackendDown(Exception):
    """A backend refused the connection or timed out."""


@dataclass
class Backend:
    name: str  # the tier it serves as, in the bundle
    url: str  # its base URL, without /v1
    instance: int  # its index in the bundle's simulated fleet
    model: str  # the bundle's name of the model it serves
    max_running: int
    served_model: str | None = None  # the backend's own id of the model (its /v1/models)
    up: bool = False
    reason: str = "not probed yet"
    state: LiveState | None = None
    has_metrics: bool = True
    in_flight: int = 0  # the gateway's own requests to it, not finished

    def live_state(self, now: float) -> LiveState:
        """What the dispatcher is given for this backend now."""
        if not self.up:
            return LiveState(float(self.max_running), DOWN_WAITING, 1.0, now)
        if self.has_metrics and self.state is not None:
            return self.state
        running = float(min(self.in_flight, self.max_running))
        return LiveState(running, float(self.in_flight) - running, 0.0, now)


class BackendPool:
    """The backends and the tasks that keep their state."""

    def __init__(self, backends: list[Backend], scrape_interval_s: float = 0.1, probe_interval_s: float = 2.0,
                 timeout_s: float = 2.0):
        self.backends = backends
        self.scrape_interval_s = scrape_interval_s
        self.probe_interval_s = probe_interval_s
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._tasks: list[asyncio.Task] = []
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        """Probe every backend once (a backend down at start is not fatal: it is re-probed), then
        keep their state in the background."""
        self._session = aiohttp.ClientSession(timeout=self.timeout)
        await asyncio.gather(*(self._probe(b) for b in self.backends))
        self._tasks = [asyncio.create_task(self._watch(b), name=f"watch {b.name}") for b in self.backends]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    def states(self) -> list[LiveState]:
        now = time.monotonic()
        return [b.live_state(now) for b in self.backends]

    def up(self) -> list[int]:
        return [b.instance for b in self.backends if b.up]

    def mark_down(self, backend: Backend, reason: str) -> None:
        if backend.up:
            log.warning("backend %s (%s) down: %s", backend.name, backend.url, reason)
        backend.up, backend.reason, backend.state = False, reason, None

    def _mark_up(self, backend: Backend) -> None:
        if not backend.up:
            log.info("backend %s (%s) up (serves %s)", backend.name, backend.url, backend.served_model)
        backend.up, backend.reason = True, ""

    async def _probe(self, backend: Backend) -> None:
        """`/v1/models` names the backend's model id (the one requests to it must carry); then a
        first scrape. Any failure leaves it down with the reason."""
        try:
            async with self._session.get(f"{backend.url}/v1/models") as response:
                if response.status != 200:
                    raise BackendDown(f"/v1/models answered {response.status}")
                listed = (await response.json()).get("data") or []
            if not listed:
                raise BackendDown("/v1/models lists no model")
            backend.served_model = str(listed[0]["id"])
            await self._scrape(backend)
            self._mark_up(backend)
        except (TimeoutError, aiohttp.ClientError, BackendDown, ValueError, KeyError, TypeError) as exc:
            self.mark_down(backend, _reason(exc))

    async def _scrape(self, backend: Backend) -> None:
        if not backend.has_metrics:
            return
        async with self._session.get(f"{backend.url}/metrics") as response:
            if response.status == 404:
                backend.has_metrics = False  # not a vLLM server: the gateway's own counts stand in
                return
            if response.status != 200:
                raise BackendDown(f"/metrics answered {response.status}")
            text = await response.text()
        try:
            backend.state = LiveState.from_vllm_metrics(text, at=time.monotonic())
        except ValueError:
            backend.has_metrics = False

    async def _watch(self, backend: Backend) -> None:
        while True:
            if backend.up:
                try:
                    await self._scrape(backend)
                except TimeoutError:
                    pass  # a busy server renders /metrics slowly: its last scrape stands, requests still decide
                except (aiohttp.ClientError, BackendDown) as exc:
                    self.mark_down(backend, _reason(exc))
                await asyncio.sleep(self.scrape_interval_s)
            else:
                await asyncio.sleep(self.probe_interval_s)
                await self._probe(backend)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"[:300]
