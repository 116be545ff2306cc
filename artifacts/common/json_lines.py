"""Strict decoding of one JSON-lines record, shared by every reader of such files.

`json.loads` accepts what later code cannot use: `NaN` / `Infinity` (not JSON, but Python reads them
as floats that then pass every `< 0` check), and `"\\ud800"` escapes that decode to lone surrogates,
which fail much later when the text is encoded (one such line once stopped prompt building). Each
problem is raised here as `LineError` naming where it is, so readers quarantine the line with that
reason and go on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")
# decoded text holds a surrogate only where the line has a \uD800-\uDFFF escape or the character
# itself (a str line): lines with neither skip the walk over every string
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class LineError(ValueError):
    """A line that cannot be used; the message is the quarantine reason, naming the field."""


def bounded_lines(stream, limit: int) -> Iterator[tuple[Any, bool]]:
    """(line, whole) for each line of a text or binary `stream`, with memory per line bounded by
    `limit`: a longer line is yielded cut to its first `limit` + 1 characters with `whole` False, and
    the rest of it is skipped unread, so a file without newlines never grows a reader."""
    while True:
        line = stream.readline(limit + 1)
        if not line:
            return
        newline = b"\n" if isinstance(line, bytes) else "\n"
        if len(line) > limit and not line.endswith(newline):
            while (rest := stream.readline(1 << 20)) and not rest.endswith(newline):
                pass  # the rest of the overlong line, never kept
            yield line, False
        else:
            yield line, True


def _reject_constant(name: str) -> Any:
    raise LineError(f"invalid JSON: {name} is not a number JSON allows")


def surrogate_field(value: Any, where: str = "") -> str | None:
    """The dotted field of the first string (key or value) holding a lone surrogate, or None."""
    if isinstance(value, str):
        return (where or "<line>") if _SURROGATE.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{where}.{key}" if where else str(key)
            if surrogate_field(key) is not None:
                return here
            found = surrogate_field(item, here)
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = surrogate_field(item, f"{where}[{i}]")
            if found is not None:
                return found
    return None


def strict_json(line: bytes | str) -> Any:
    """The record on `line`, or LineError: invalid UTF-8, invalid JSON (NaN and Infinity included),
    or a string field holding invalid Unicode."""
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise LineError(f"invalid UTF-8 at byte {exc.start}") from None
    try:
        record = json.loads(line, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise LineError(f"invalid JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise LineError("invalid JSON: nested too deeply") from None
    field = surrogate_field(record) if _SURROGATE_ESCAPE.search(line) or _SURROGATE.search(line) else None
    if field is not None:
        raise LineError(f"field {field!r} holds invalid Unicode (a lone surrogate)")
    return record
