"""Production request logs as training data: prompts for the router, latency records for the heads.

One JSON object per line (plain or .gz), OpenAI-format, as a gateway or proxy logs it:

    {"timestamp": "2026-11-20T10:00:00.120Z",      # when the request was sent (ISO 8601 or epoch s)
     "request":  {"model": "m", "messages": [{"role": "user", "content": "..."}]},   # chat, or
                 {"model": "m", "prompt": "..."},                                     # completions
     "response": {"model": "m", "object": "chat.completion",
                  "choices": [{"message": {"content": "..."}}],   # or [{"text": "..."}]
                  "usage": {"prompt_tokens": 12, "completion_tokens": 40}},
     "timing":   {"ttft_s": 0.031, "e2e_s": 0.52},  # optional: per-request timing, where logged
     "tier":     "m@a100",                          # optional: the tier that served it
     "metadata": {"task": "math"},                  # optional
     "outcome":  {"thumbs_up": true},               # optional: a score in [0, 1] (a number, or
                                                    # {"score": x}), {"thumbs_up": bool}, {"error": ...} (0)
     "routing":  {"propensity": 0.83}}              # optional: the probability the serving router had
                                                    # of choosing this model (`routeforge bundle replay`)

Who reported an outcome (its source, so one client cannot outweigh the rest) is the id the gateway
authenticated, which it writes at `auth.client_id` (`SOURCE_FIELD`; `training.outcomes.source_field`
names another). Fields a caller can set itself (`client`, `metadata.user`, the OpenAI `user`) are
never a source: a line without the authenticated id counts with every other such line as the one
source `UNAUTHENTICATED`, so inventing a new name per line buys no extra weight.

A line that cannot be used goes to the quarantine with a reason naming the field, and the reader
goes on. A request without `timing` is still a prompt; it is not a latency record.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from routeforge.artifacts.operating.traffic_prompts import (
    LineTooLong,
    LogLineError,
    log_lines,
    log_paths,
    outcome_of,
    prompt_text,
    served_model,
)
from routeforge.core.json_lines import LineError, strict_json
from routeforge.core.storage import Quarantine
from upath import UPath

MAX_EPOCH_S = 1e11  # year 5138: beyond it a number is not an epoch-seconds time
SOURCE_FIELD = "auth.client_id"  # where the gateway writes the caller it authenticated
UNAUTHENTICATED = "(unauthenticated)"  # the one source of every line without that id


@dataclass(frozen=True)
class TrafficRequest:
    row_id: str
    sent_s: float  # epoch seconds
    model: str
    tier: str | None
    text: str
    completion: str | None
    task: str | None
    prompt_tokens: int
    completion_tokens: int
    ttft_s: float | None
    e2e_s: float | None
    outcome: float | None = None  # what production said of the answer, in [0, 1] (`outcome_of`)
    source: str = UNAUTHENTICATED  # who reported the outcome: the gateway's authenticated id (`_source`)

    @property
    def timed(self) -> bool:
        return self.ttft_s is not None and self.e2e_s is not None


def _timestamp(value: Any) -> float:
    if isinstance(value, bool):
        raise LogLineError("field 'timestamp' is a boolean, not a time")
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or abs(value) > MAX_EPOCH_S:
            raise LogLineError(f"field 'timestamp': {value!r} is not a time")
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except (ValueError, OverflowError, OSError) as exc:
            raise LogLineError(f"field 'timestamp': {value!r} is not ISO 8601 or epoch seconds") from exc
    raise LogLineError("field 'timestamp' missing")


def _count(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LogLineError(f"field 'response.usage.{key}' missing or not a non-negative integer")
    return value


def _seconds(timing: dict[str, Any], key: str) -> float | None:
    value = timing.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise LogLineError(f"field 'timing.{key}' is not a finite, non-negative number of seconds")
    return float(value)


def _source(rec: dict[str, Any], field: str) -> str:
    """The authenticated id at the dotted path `field`, as text (at most 200 characters);
    `UNAUTHENTICATED` when the line has none."""
    value: Any = rec
    for key in field.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip():
        return source_id(value)
    return UNAUTHENTICATED


def source_id(value: str | int) -> str:
    """The source a logged id counts as (cut to 200 characters): what `training.outcomes.sources` lists."""
    return "auth:" + str(value)[:200]


def parse_line(rec: Any, row_id: str, source_field: str = SOURCE_FIELD) -> TrafficRequest:
    if not isinstance(rec, dict):
        raise LogLineError("line is not a JSON object")
    request, response = rec.get("request"), rec.get("response")
    if not isinstance(request, dict):
        raise LogLineError("field 'request' missing or not an object")
    if not isinstance(response, dict):
        raise LogLineError("field 'response' missing or not an object")
    model = served_model(rec)
    usage = response.get("usage")
    if not isinstance(usage, dict):
        raise LogLineError("field 'response.usage' missing")
    choices = response.get("choices") or []
    if not isinstance(choices, list):
        raise LogLineError("field 'response.choices' is not a list")
    first = choices[0] if choices and isinstance(choices[0], dict) else {}
    message = first.get("message")
    if message is not None and not isinstance(message, dict):
        raise LogLineError("field 'response.choices[0].message' is not an object")
    completion = (message or {}).get("content") if "message" in first else first.get("text")
    timing = rec.get("timing") or {}
    if not isinstance(timing, dict):
        raise LogLineError("field 'timing' is not an object")
    ttft, e2e = _seconds(timing, "ttft_s"), _seconds(timing, "e2e_s")
    if ttft is not None and e2e is not None and ttft > e2e:
        raise LogLineError(f"field 'timing': ttft_s {ttft} is after e2e_s {e2e}")
    metadata = rec.get("metadata") or {}
    task = metadata.get("task") if isinstance(metadata, dict) else None
    return TrafficRequest(
        row_id=row_id, sent_s=_timestamp(rec.get("timestamp")), model=model,
        tier=rec.get("tier") if isinstance(rec.get("tier"), str) else None, text=prompt_text(request),
        completion=completion if isinstance(completion, str) else None,
        task=str(task) if task is not None else None, prompt_tokens=_count(usage, "prompt_tokens"),
        completion_tokens=_count(usage, "completion_tokens"), ttft_s=ttft, e2e_s=e2e, outcome=outcome_of(rec),
        source=_source(rec, source_field),
    )


def log_files(uri: str) -> list[UPath]:
    """The log files at `uri`: the file itself, or every *.jsonl / *.jsonl.gz under a folder (local
    path or fsspec URI), in name order."""
    return log_paths(_existing(uri))


def _existing(uri: str) -> UPath:
    root = UPath(uri)
    if not root.exists():
        raise FileNotFoundError(f"traffic log location {uri} does not exist")
    return root


def read_traffic_logs(uri: str, quarantine: Quarantine, limit: int | None = None,
                      source_field: str = SOURCE_FIELD) -> Iterator[TrafficRequest]:
    """Every usable request in the logs at `uri`; unusable lines go to `quarantine` with the reason.
    `source_field`: the dotted path of the id the gateway authenticated (`SOURCE_FIELD`)."""
    count = 0
    for row_id, line in log_lines(_existing(uri)):
        if isinstance(line, LineTooLong):
            quarantine.add(row_id, line.reason, None)
            continue
        try:
            request = parse_line(strict_json(line), row_id, source_field)
        except (LogLineError, LineError) as exc:
            quarantine.add(row_id, str(exc), None)
            continue
        except Exception as exc:  # noqa: BLE001 - no line may stop the stage: an unforeseen one is quarantined
            quarantine.add(row_id, f"unusable line: {type(exc).__name__}: {str(exc)[:200]}", None)
            continue
        yield request
        count += 1
        if limit is not None and count >= limit:
            return
