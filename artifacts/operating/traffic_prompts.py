"""The fields of a logged request as the router reads them (the prompt it would have seen, the
served model, the outcome, the serving decision's propensity): one definition for the pipeline's
traffic-log reader (`prompts/traffic_logs.py`), the runtime's `routeforge bundle calibrate --logs`
(which re-fits the budget table on a traffic mix) and `routeforge bundle replay`, so all read a log alike.
Standard library only: a router service has neither pyarrow nor fsspec."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from routeforge.artifacts.common.json_lines import bounded_lines, strict_json


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


def outcome_of(rec: dict[str, Any]) -> float | None:
    """The line's `outcome`, in [0, 1]: a number (a score), or an object with `score` (0…1),
    `thumbs_up` (true 1, false 0) or `error` (any error: 0); absent: None."""
    value = rec.get("outcome")
    if value is None:
        return None
    if isinstance(value, dict):
        if value.get("error"):
            return 0.0
        if "thumbs_up" in value:
            if not isinstance(value["thumbs_up"], bool):
                raise LogLineError("field 'outcome.thumbs_up' is not true or false")
            return float(value["thumbs_up"])
        value = value.get("score")
        field = "outcome.score"
    else:
        field = "outcome"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise LogLineError(f"field '{field}' is not a number in [0, 1]")
    return float(value)


def propensity_of(rec: dict[str, Any]) -> float | None:
    """`routing.propensity`: the probability the serving rule had of choosing the model it served
    (`Router.choose(..., with_propensity=True)`, `Routing.log_fields`), in (0, 1]; absent: None."""
    routing = rec.get("routing")
    if routing is None:
        return None
    if not isinstance(routing, dict):
        raise LogLineError("field 'routing' is not an object")
    value = routing.get("propensity")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise LogLineError(f"field 'routing.propensity': {value!r} is not a probability in (0, 1]")
    return float(value)


def served_model(rec: dict[str, Any]) -> str:
    """The model that answered: `response.model`, else `request.model`."""
    response, request = rec.get("response"), rec.get("request")
    model = (response.get("model") if isinstance(response, dict) else None) or \
        (request.get("model") if isinstance(request, dict) else None)
    if not isinstance(model, str) or not model:
        raise LogLineError("field 'response.model' / 'request.model' missing")
    return model


def log_paths(path: Path) -> list[Path]:
    """The log file `path`, or every *.jsonl / *.jsonl.gz under the folder `path`, in name order (a
    `pathlib.Path` or anything with its API, e.g. a `upath.UPath` on object storage)."""
    return [path] if path.is_file() else sorted(
        (p for p in path.rglob("*") if p.name.endswith((".jsonl", ".jsonl.gz")) and p.is_file()), key=str)


MAX_LINE_BYTES = 4 << 20  # no logged request comes near 4 MB; a longer line is refused, never held whole


class LineTooLong(bytes):
    """What `log_lines` yields in place of a line longer than `MAX_LINE_BYTES` (its first bytes only);
    readers skip it by its type, saying `reason`."""

    @property
    def reason(self) -> str:
        return f"longer than {MAX_LINE_BYTES:,} bytes"


def log_lines(path: Path) -> Iterator[tuple[str, bytes]]:
    """(row id `file:line`, line) of every non-blank line of the logs at `path` (`log_paths`), read as a
    stream: memory per line is bounded by `MAX_LINE_BYTES`, a longer line yielded as `LineTooLong`."""
    for file in log_paths(path):
        with file.open("rb") as handle:
            stream = gzip.open(handle) if file.name.endswith(".gz") else handle
            for number, (line, whole) in enumerate(bounded_lines(stream, MAX_LINE_BYTES), start=1):
                if not whole:
                    yield f"{file.name}:{number}", LineTooLong(line[:256])
                    continue
                if line.strip():
                    yield f"{file.name}:{number}", line.rstrip(b"\r\n")


MAX_PROMPT_CHARS = 32_768  # each side of a calibration prompt past any encoder's window (512 tokens)


def bounded_prompt(text: str) -> str:
    """`text`, or its first and last `MAX_PROMPT_CHARS // 2` characters around a space when it is
    longer: every encoder reads at most a few hundred tokens from one end (right or left truncation),
    and 300 distinct 4 MB prompts held whole took 2.3 GB and never finished encoding."""
    half = MAX_PROMPT_CHARS // 2
    return text if len(text) <= MAX_PROMPT_CHARS else f"{text[:half]} {text[-half:]}"


def logged_prompts(path: Path, limit: int = 100_000) -> list[str]:
    """The prompts of the requests in a local log file, or in every *.jsonl / *.jsonl.gz under a
    folder (name order), at most `limit`, each at most `MAX_PROMPT_CHARS` long (`bounded_prompt`);
    lines that hold no usable request are skipped."""
    out: list[str] = []
    for _, line in log_lines(Path(path)):
        if isinstance(line, LineTooLong):
            continue
        try:  # strict: a nesting bomb or a lone surrogate is one skipped line, as in the pipeline's reader
            record = strict_json(line)
            out.append(bounded_prompt(prompt_text(record["request"])))
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        if len(out) >= limit:
            return out
    return out
