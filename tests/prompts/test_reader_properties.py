"""No input line can stop a stage (issue 37): for arbitrary bytes and arbitrary JSON rows, every reader
(prompt files, the prompts stage, traffic logs, score tables, RouterBench and RouteLLM response tables,
long JSON-lines response tables, traces) raises nothing, and every input row is either kept or
quarantined with a reason (the counts add up)."""

from __future__ import annotations

import csv
import io
import json
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from routeforge.core.config import load_fleet
from routeforge.core.config.datasets import RouteLLMDataset, RouterBenchDataset, ScoreTableDataset
from routeforge.core.storage import Quarantine
from routeforge.prompts.readers import read_dataset
from routeforge.prompts.response_tables import jsonl_responses, routellm_responses, routerbench_responses
from routeforge.prompts.score_tables import score_table_responses
from routeforge.prompts.sources import build_prompts
from routeforge.prompts.traffic_logs import read_traffic_logs
from routeforge.training.policies.simulator.traces import TraceColumns, TraceError, read_trace

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


def _file(folder: str, name: str, lines: list[bytes]) -> Path:
    """`lines` written to `folder/name`, one per line."""
    path = Path(folder) / name
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


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
        log = _file(tmp, "gateway.jsonl", lines)
        quarantine = Quarantine("prompts")
        kept = list(read_traffic_logs(str(log), quarantine))
        assert len(kept) + len(quarantine) == _non_blank(lines)
        for request in kept:  # what is kept is usable downstream
            request.text.encode("utf-8")
            assert request.sent_s == request.sent_s and (request.e2e_s is None or request.e2e_s >= 0)


# --- score tables, response tables and traces: the same property, each reader's own row shapes ---

SCORES = st.dictionaries(st.sampled_from(["alpha", "beta", "\ud800"]) | st.text(max_size=4),
                         st.floats() | st.integers() | st.booleans() | st.text(max_size=4) | st.none(), max_size=3)
SCORE_ROWS = st.fixed_dictionaries({}, optional={"question": st.text() | JSON, "scores": SCORES | JSON,
                                                 "task": st.text(max_size=6) | JSON}) | st.fixed_dictionaries(
    {"question": st.text(min_size=1).filter(str.strip), "scores": st.fixed_dictionaries(
        {}, optional={m: st.floats(0, 1) for m in ("alpha", "beta")})})  # usable rows too
CELL = st.text(max_size=20) | st.sampled_from(["['a prompt']", "[1, 2]", "['x'", "inf", "nan", "1e999", "0", "1",
                                                "((((((((((((((((((((((((((((((((((((((((", "\ud800"])
CELL = CELL | st.text(min_size=1, max_size=8).map(lambda t: repr([t]))  # a usable prompt literal, often
ROUTERBENCH_ROWS = st.fixed_dictionaries({"sample_id": CELL, "prompt": CELL, "eval_name": CELL, "alpha": CELL,
                                          "alpha|model_response": CELL, "alpha|total_cost": CELL})
ROUTELLM_ROWS = st.fixed_dictionaries({"prompt": CELL, "alpha": CELL, "alpha_response": CELL})
TRACE_ROWS = st.fixed_dictionaries({}, optional={k: CELL | st.floats() | st.integers() | JSON
                                                 for k in ("ts", "in", "out")}) | st.fixed_dictionaries(
    {"ts": st.integers(0, 10**6), "in": st.integers(1, 4096), "out": st.integers(1, 4096)})  # usable rows too


def _csv_lines(rows: st.SearchStrategy) -> st.SearchStrategy:
    """CSV data lines: rows written by the csv module (cells may hold lone surrogates, written as the
    invalid bytes they stand for), or arbitrary bytes."""
    def encode(row: dict) -> bytes:
        out = io.StringIO()
        csv.writer(out).writerow(list(row.values()))
        return out.getvalue().rstrip("\r\n").encode("utf-8", "surrogatepass")
    raw = st.binary(max_size=60).map(lambda b: b.replace(b"\n", b" ").replace(b"\r", b" "))
    return st.lists(st.one_of(rows.map(encode), raw), min_size=1, max_size=10)


def _csv_records(path: Path) -> int:
    """The data records Python's CSV reader finds in the file, blank lines aside (what 'every input
    row' means for CSV)."""
    with open(path, newline="", encoding="utf-8", errors="surrogateescape") as f:
        return max(0, sum(1 for record in csv.reader(f) if record) - 1)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=_lines(SCORE_ROWS))
def test_score_table_reader_keeps_or_quarantines_every_line(lines):
    with tempfile.TemporaryDirectory() as tmp:
        path = _file(tmp, "scores.jsonl", lines)
        ds = ScoreTableDataset(kind="score_table", name="scores", files={"train": [path]}, task_field="task",
                               models=["alpha", "beta"])
        quarantine = Quarantine("prompts")
        kept = list(read_dataset(ds, quarantine))
        assert len(kept) + len(quarantine) == _non_blank(lines)
        event("some rows kept" if kept else "every row quarantined")
        for model in ("alpha", "beta"):  # every score cell is a usable number in [0, 1] or says why not
            for cell in score_table_responses(ds.files, model, text_field="question", scores_field="scores").values():
                assert (cell.problem is None and 0.0 <= cell.label <= 1.0) or (cell.text is None and cell.problem)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=_csv_lines(ROUTERBENCH_ROWS))
def test_routerbench_table_reader_keeps_or_quarantines_every_row(lines):
    header = b"sample_id,prompt,eval_name,alpha,alpha|model_response,alpha|total_cost"
    with tempfile.TemporaryDirectory() as tmp:
        path = _file(tmp, "rb.csv", [header, *lines])
        ds = RouterBenchDataset(kind="routerbench", name="rb", files={"train": [path]})
        quarantine = Quarantine("prompts")
        kept = list(read_dataset(ds, quarantine))
        assert len(kept) + len(quarantine) == _csv_records(path)
        assert all(p.task.strip() for p in kept)
        event("some rows kept" if kept else "every row quarantined")
        cells = routerbench_responses(ds.files, "alpha", None)
        assert len(cells) == _csv_records(path)
        for cell in cells.values():
            _usable(cell)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=_csv_lines(ROUTELLM_ROWS))
def test_routellm_table_reader_keeps_or_quarantines_every_row(lines):
    with tempfile.TemporaryDirectory() as tmp:
        path = _file(tmp, "rl.csv", [b"prompt,alpha,alpha_response", *lines])
        ds = RouteLLMDataset(kind="routellm", name="rl", path=path)
        quarantine = Quarantine("prompts")
        kept = list(read_dataset(ds, quarantine))
        assert len(kept) + len(quarantine) == _csv_records(path)
        for cell in routellm_responses(path, "alpha", None).values():
            _usable(cell)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=_lines(st.fixed_dictionaries({}, optional={"uid": JSON, "answer": JSON, "score": JSON, "cost": JSON})))
def test_long_response_table_reader_keeps_or_counts_every_line(lines):
    with tempfile.TemporaryDirectory() as tmp:
        path = _file(tmp, "answers.jsonl", lines)
        cells, problems = jsonl_responses(path, key_field="uid", response_field="answer", model_field=None,
                                          model="alpha", label_field="score", cost_field="cost")
        assert len(cells) + sum(problems.values()) == _non_blank(lines)
        for cell in cells.values():
            _usable(cell)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=_lines(TRACE_ROWS), csv_lines=_csv_lines(TRACE_ROWS))
def test_trace_reader_keeps_or_quarantines_every_row(lines, csv_lines):
    columns = TraceColumns(timestamp="ts", timestamp_unit="s", prompt_tokens="in", output_tokens="out")
    with tempfile.TemporaryDirectory() as tmp:
        for path, expected in ((Path(tmp) / "trace.jsonl", lambda p: _non_blank(lines)),
                               (Path(tmp) / "trace.csv", _csv_records)):
            body = lines if path.suffix == ".jsonl" else [b"ts,in,out", *csv_lines]
            path.write_bytes(b"\n".join(body) + b"\n")
            quarantine = Quarantine("traces")
            try:
                times, prompt, output = read_trace(path, columns=columns, quarantine=quarantine)
            except TraceError as exc:  # only when nothing is usable, said in one line
                assert "no usable rows" in str(exc) and len(quarantine) == expected(path)
                continue
            assert len(times) + len(quarantine) == expected(path)
            event(f"{path.suffix}: rows kept")
            assert times[0] == 0.0 and np.all(np.diff(times) >= 0) and np.all(np.isfinite(times))
            assert prompt.min() >= 1 and output.min() >= 1


def _usable(cell) -> None:
    """An imported cell is either text that encodes with finite label and cost, or a reason."""
    if cell.text is None:
        assert cell.problem
        return
    cell.text.encode("utf-8")
    assert all(v is None or np.isfinite(v) for v in (cell.label, cell.cost))
