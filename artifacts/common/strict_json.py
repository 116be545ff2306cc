"""JSON that strict parsers accept: NaN and infinities (unknown or unbounded numbers in reports and
predictions) become null. Python's `json.dumps` writes `NaN`, which is not JSON."""

from __future__ import annotations

import json
import math
from typing import Any


def finite(value: Any) -> Any:
    """`value` with every non-finite float (also inside lists, tuples and dicts) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # NumPy scalars
        return finite(value.item())
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """`json.dumps` of `finite(value)`, refusing any NaN left (`allow_nan=False`)."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)
