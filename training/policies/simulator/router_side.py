"""What a routing policy under evaluation is handed in the simulator instead of the cluster: the router's
own view (`routeforge.artifacts.deciding.observation.RouterView`: its in-flight sends and the instances' latest
`/metrics` scrapes) and the static facts it is configured with. Nothing in it reaches an `Instance`.

Why a separate object: a policy handed the cluster can read state no deployed router has (each
instance's busy time, the exact prompts waiting there), and a gain measured that way does not survive
deployment. Only the clairvoyant references, which say so (`reads_simulator_state = True`), get the
cluster itself.
"""

from __future__ import annotations

from typing import Any

from routeforge.artifacts.deciding.observation import ObservedInstance, RouterView


class RouterSide:
    """The router-visible side of a `Cluster` at one decision time."""

    __slots__ = ("_view", "models", "block_tokens", "now")

    def __init__(self, view: RouterView, models: list[int], block_tokens: int | None, now: float):
        self._view, self.models, self.block_tokens, self.now = view, models, block_tokens, now

    def __len__(self) -> int:
        return len(self._view)

    def outstanding(self) -> list[int]:
        """Requests running and waiting per instance, as the router counts them."""
        return self._view.outstanding(self.now)

    def scrapes(self) -> list:
        """Each instance's latest `/metrics` scrape (`Scrape`), as the router holds them."""
        return list(self._view.scrapes)

    def instances(self, now: float | None = None) -> list[ObservedInstance]:
        return self._view.observe(self.now if now is None else now)

    def observe(self, request, now: float | None = None) -> tuple[dict[str, Any], list[ObservedInstance]]:
        """The request as a router service is asked it (its predicted lengths and qualities per instance,
        its prompt's block ids where the fleet caches prefixes, the router's clock) and every instance's
        observation."""
        hashes = request.hash_ids if self.block_tokens else ()
        asked = {"prompt_tokens": request.prompt_tokens,
                 "predicted_output_tokens": [request.est_tokens(m) for m in self.models],
                 "predicted_quality": [request.est_quality(m) for m in self.models],
                 "hash_ids": list(hashes), "block_tokens": self.block_tokens or 0,
                 "now_s": self.now if now is None else now}
        return asked, self.instances(now)

    def prefix_overlaps(self, hash_ids) -> list[float]:
        """The share of `hash_ids` (a prompt's block ids) each instance holds as a leading run in the
        router's own index of what it sent where (0 everywhere where the fleet caches no prefixes)."""
        index = self._view.index
        if index is None or not hash_ids:
            return [0.0] * len(self._view)
        return [blocks / len(hash_ids) for blocks in index.overlaps(hash_ids)]
