"""The gateway's decision log: one JSON line per request, in the traffic-log format
(`routeforge.prompts.traffic_logs` documents a line), so `routeforge bundle replay` and the outcome
learning read it as they read any gateway's log.

A line holds the request as the client sent it (its prompt: the log is as private as the traffic),
the bundle's name of the model that served it with its usage, the timing the gateway saw (TTFT at
the first token chunk, E2E at the stream's end, and the gateway's own time `gateway_s`: reading,
parsing, the model's choice, the decision and the first token's passing through, each under
`gateway_parts_s`), the tier, and under `routing` the decision: policy, instance, backend, the model choice's
propensity, the dispatcher's predicted TTFT/E2E, attempts. `status` says how the request ended:
served, retried (served by a second backend after the first failed before streaming), failed
(no backend served it; HTTP 502), broken (the backend failed mid-stream), refused (overload: 503),
bad_request (400), not_served (404: no backend serves the model named), cancelled (the client left),
feedback (an outcome reported later, below). A request's line is written once its response has
ended (E2E is measured at its last byte), so a client may see the end a moment before the line.

Outcomes come later: `POST /v1/feedback` with the request's id (the `X-Routeforge-Request-Id`
header of its response) writes the request's line again with `outcome` and without `timing`: replay
counts the line with an outcome and skips the first as "no outcome"; the traffic-log profile takes
the first as the request's latency record and the second as an untimed request (none counted twice).
The last `keep` decisions are kept for feedback.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any


class DecisionLog:
    def __init__(self, path: Path | None, keep: int = 10_000):
        self.path = path
        self.keep = keep
        self._recent: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._file = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 - held for the server's life

    def write(self, record: dict[str, Any]) -> None:
        """Append `record` (flushed per line: a crash loses no decided request)."""
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n"
        with self._lock:
            if self._file is not None:
                self._file.write(line)
            if record.get("status") in ("served", "retried"):
                self._recent[record["id"]] = record
                while len(self._recent) > self.keep:
                    self._recent.popitem(last=False)

    def feedback(self, request_id: str, outcome: Any) -> dict[str, Any]:
        """Write request `request_id`'s line again with `outcome` (a score in [0, 1], or
        {"score": x} / {"thumbs_up": bool}); KeyError where it is not among the last `keep` served."""
        with self._lock:
            record = self._recent.get(request_id)
        if record is None:
            raise KeyError(request_id)
        with_outcome = {k: v for k, v in record.items() if k != "timing"} | {"outcome": outcome, "status": "feedback"}
        self.write(with_outcome)
        return with_outcome

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
