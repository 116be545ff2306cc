"""No input line can stop a stage (issue 37): for arbitrary bytes and arbitrary JSON rows, the prompt
file reader and the traffic-log reader raise nothing, and every non-blank line is either kept or
quarantined with a reason (the counts add up)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from routeforge.core.config import load_fleet
from routeforge.core.storage import Quarantine
from routeforge.prompts.readers import read_dataset
from routeforge.prompts.sources import build_prompts
from routeforge.prompts.traffic_logs import read_traffic_logs

from tests.conftest import write_config

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)
PROMPT_ROWS = st.fixed_dictionaries({}, optional={"prompt": st.text() | JSON, "task": st.text() | JSON,
                                                  "reference": st.text() | JSON, "id": JSON})
LOG_ROWS = st.fixed_dictionaries({}, optional={
    "timestamp": st.floats() | st.text() | st.integers() | st.booleans() | st.none(),
    "request": st.fixed_dictionaries({}, optional={"model": JSON, "prompt": JSON,
                                                   "messages": st.lists(st.dictionaries(st.sampled_from(
                                                       ["role", "content"]), JSON), max_size=3) | JSON}) | JSON,
    "response": st.fixed_dictionaries({}, optional={"model": JSON, "choices": JSON | st.lists(
        st.fixed_dictionaries({}, optional={"message": JSON, "text": JSON}), max_size=2),
        "usage": st.fixed_dictionaries({}, optional={"prompt_tokens": JSON, "completion_tokens": JSON}) | JSON}),
    "timing": st.fixed_dictionaries({}, optional={"ttft_s": JSON, "e2e_s": JSON}) | JSON,
    "metadata": JSON, "tier": JSON})
SURROGATES = st.sampled_from(['{"prompt": "\\ud800", "task": "t"}', '{"prompt": "a\\udfff", "task": "t"}',
                              '{"\\ud800": 1}', '{"prompt": NaN, "task": "t"}', '{"prompt": "x", "task": Infinity}'])


def _lines(rows: st.SearchStrategy) -> st.SearchStrategy:
    """One line each: an arbitrary JSON row, a hostile literal, or arbitrary bytes (no newline)."""
    as_json = rows.map(lambda r: json.dumps(r, allow_nan=True).encode("utf-8", "surrogatepass"))
    raw = st.binary(max_size=60).map(lambda b: b.replace(b"\n", b" ").replace(b"\r", b" "))
    return st.lists(st.one_of(as_json, SURROGATES.map(str.encode), raw), min_size=1, max_size=12)


def _fleet(folder: Path, lines: list[bytes]):
    """The demo fleet reading `lines` as its one JSON-lines prompt file (ids from the `id` field)."""
    data = folder / "prompts.jsonl"
    data.write_bytes(b"\n".join(lines) + b"\n")
    return load_fleet(write_config(folder, "demo", datasets=[{"kind": "jsonl", "name": "local", "path": str(data),
                                                              "id_field": "id"}]))


def _non_blank(lines: list[bytes]) -> int:
    return sum(1 for line in lines if line.strip())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=_lines(PROMPT_ROWS))
def test_prompt_file_reader_keeps_or_quarantines_every_line(lines):
    with tempfile.TemporaryDirectory() as tmp:
        dataset = _fleet(Path(tmp), lines).datasets[0]
        quarantine = Quarantine("prompts")
        kept = list(read_dataset(dataset, quarantine))
        assert len(kept) + len(quarantine) == _non_blank(lines)
        assert all(r["reason"] for r in quarantine.rows)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=_lines(PROMPT_ROWS))
def test_prompt_stage_keeps_or_quarantines_every_line(lines):
    """The whole `prompts` stage (normalise, template, ids, duplicates, length limit) over the same
    lines plus one good one: it finishes, and kept + quarantined is every non-blank line."""
    good = json.dumps({"prompt": "What is 2 + 2?", "task": "math", "reference": "4"}).encode()
    with tempfile.TemporaryDirectory() as tmp:
        table, quarantine = build_prompts(_fleet(Path(tmp), [good, *lines]))
        assert table.num_rows + len(quarantine) == _non_blank([good, *lines])
        assert quarantine.write(Path(tmp) / "quarantine").exists()  # writable: no invalid Unicode left in it


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=_lines(LOG_ROWS))
def test_traffic_log_reader_keeps_or_quarantines_every_line(lines):
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "gateway.jsonl"
        log.write_bytes(b"\n".join(lines) + b"\n")
        quarantine = Quarantine("prompts")
        kept = list(read_traffic_logs(str(log), quarantine))
        assert len(kept) + len(quarantine) == _non_blank(lines)
        for request in kept:  # what is kept is usable downstream
            request.text.encode("utf-8")
            assert request.sent_s == request.sent_s and (request.e2e_s is None or request.e2e_s >= 0)
