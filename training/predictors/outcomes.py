"""Production outcomes into a freshly trained router: the next bundle starts from what the last one learned.

Traffic logs may carry an `outcome` per request (a score, a thumbs-up, an error:
`prompts.traffic_logs`). A router service learns from them between retrains through the runtime's
`Router.update`; when the pipeline retrains, it replays every logged outcome of the fleet's
traffic logs into the new router the same way, so the bundle it registers begins where production
left off instead of at the training means. Requests served by a model the router does not know
(retired, or outside the fleet) are counted and skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from routeforge.artifacts.router import Router
from routeforge.core.storage import Quarantine
from routeforge.prompts.traffic_logs import read_traffic_logs


def replay_outcomes(router: Router, log_uris: list[str], encoder, quarantine: Quarantine,
                    log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every logged outcome of the logs at `log_uris` into `router` (`Router.update`, embedding
    with `encoder`); returns the counts for the report."""
    texts, models, outcomes, foreign = [], [], [], 0
    for uri in log_uris:
        for request in read_traffic_logs(uri, quarantine):
            if request.outcome is None:
                continue
            if request.model not in router.models:
                foreign += 1
                continue
            texts.append(request.text)
            models.append(request.model)
            outcomes.append(request.outcome)
    counted = router.update(texts, models, np.asarray(outcomes, dtype=float), encoder=encoder) if texts else 0
    out = {"logged_outcomes": len(texts) + foreign, "counted": counted, "other_models": foreign,
           "unseen_task": len(texts) - counted}
    if texts or foreign:
        log(f"router: learned from {counted} production outcomes ({foreign} of models it does not route to, "
            f"{len(texts) - counted} far from every training cluster)")
    return out
