"""The prompt of a logged request, as the router would have seen it: one definition for the
pipeline's traffic-log reader (`prompts/traffic_logs.py`) and the runtime's `routeforge bundle
calibrate --logs` (which re-fits the budget table on a traffic mix), so both read a log alike.
Standard library only: a router service has neither pyarrow nor fsspec."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


class LogLineError(ValueError):
    """A log line that cannot be used; the message is the quarantine reason."""


def prompt_text(request: dict[str, Any]) -> str:
    """The prompt the router would have seen: a completions `prompt`, a chat's only user message, or
    a multi-turn chat as `role: content` lines."""
    if "messages" in request:
        messages = request["messages"]
        if not isinstance(messages, list) or not messages:
            raise LogLineError("field 'request.messages' is not a non-empty list")
        parts = []
        for i, m in enumerate(messages):
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, list):  # content parts: keep the text ones
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            if not isinstance(content, str):
                raise LogLineError(f"field 'request.messages[{i}].content' is not text")
            parts.append((m.get("role", "user"), content))
        if len(parts) == 1 and parts[0][0] == "user":
            text = parts[0][1]
        else:
            text = "\n".join(f"{role}: {content}" for role, content in parts)
    elif "prompt" in request:
        text = request["prompt"]
        if isinstance(text, list) and len(text) == 1:
            text = text[0]
        if not isinstance(text, str):
            raise LogLineError("field 'request.prompt' is not a string")
    else:
        raise LogLineError("field 'request' has neither 'messages' nor 'prompt'")
    if not text.strip():
        raise LogLineError("the prompt is empty")
    return text


def logged_prompts(path: Path, limit: int = 100_000) -> list[str]:
    """The prompts of the requests in a local log file, or in every *.jsonl / *.jsonl.gz under a
    folder (name order), at most `limit`; lines that hold no usable request are skipped."""
    path = Path(path)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.name.endswith((".jsonl", ".jsonl.gz")))
    out: list[str] = []
    for file in files:
        raw = file.read_bytes()
        if file.name.endswith(".gz"):
            raw = gzip.decompress(raw)
        for line in raw.splitlines():
            try:
                record = json.loads(line)
                out.append(prompt_text(record["request"]))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            if len(out) >= limit:
                return out
    return out
