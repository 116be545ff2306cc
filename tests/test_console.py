"""The quiet console of `python -m routeforge.pipelines.run`: stage lines on the terminal, everything else
(Python and native writes to stdout and stderr) in the log file, a heartbeat for quiet stages."""

from __future__ import annotations

import io
import os
import re
import sys
import time

from routeforge.core.progress import Counted, format_count, parse_count
from routeforge.pipelines.console import ProgressConsole, output_to_file, silence_progress_bars


def test_output_goes_to_the_log_file_and_stage_lines_to_the_terminal(tmp_path, capfd):
    log = tmp_path / "logs" / "run.log"
    with output_to_file(log) as terminal, ProgressConsole(terminal, total=2, heartbeat_s=60) as console:
        silence_progress_bars()
        console.begin("prompts")
        print("a python print")
        sys.stderr.write("a python stderr write\n")
        os.write(1, b"a native write to fd 1\n")
        os.write(2, b"a native write to fd 2\n")
        console.end("prompts", 0.25)
    out, err = capfd.readouterr()
    assert out.splitlines() == ["[1/2] prompts                                    0.2s"]
    assert err == ""
    text = log.read_text()
    for line in ("a python print", "a python stderr write", "a native write to fd 1", "a native write to fd 2",
                 ):
        assert line in text
    assert "TQDM_DISABLE" not in os.environ  # the environment is restored


def _beats(stream: io.StringIO, at_least: int, timeout_s: float = 15.0) -> list[str]:
    """The heartbeat lines written so far, waiting (bounded) until there are `at_least`: a loaded
    machine may delay the heartbeat thread, never stop it."""
    deadline = time.monotonic() + timeout_s
    while True:
        beats = [line for line in stream.getvalue().splitlines() if "running for" in line]
        if len(beats) >= at_least or time.monotonic() > deadline:
            return beats
        time.sleep(0.1)


def test_heartbeat_names_the_latest_message_of_a_quiet_stage():
    stream = io.StringIO()
    with ProgressConsole(stream, total=1, heartbeat_s=1) as console:
        console.begin("train_and_register")
        console.note("router_selection", "router selection: 2/4 candidates\nsecond line")
        beats = _beats(stream, 2)
        console.end("train_and_register", 2.6)
    lines = stream.getvalue().splitlines()
    # the message once, in the first heartbeat; later beats of a quiet stage only say it is alive
    assert len(beats) >= 2 and beats[0].endswith("router_selection: router selection 2/4 candidates")
    assert not any("candidates" in b for b in beats[1:])
    assert "second line" not in "\n".join(lines)
    assert lines[-1].startswith("[1/1] train_and_register")


def test_a_quiet_stage_says_it_is_alive_ever_less_often():
    """Issue 73, item 3: "… running for 242s" repeated every heartbeat with no news. Now a beat with
    nothing new waits twice as long as the one before (1, 2, 4 × heartbeat_s): in 7.5 s of a quiet
    stage at heartbeat_s=1, at most 4 lines (the first with the message), where there were 7."""
    stream = io.StringIO()
    with ProgressConsole(stream, total=1, heartbeat_s=1) as console:
        console.begin("train_and_register")
        console.note("router_selection", "router selection started")
        assert len(_beats(stream, 2)) >= 2
        time.sleep(max(0.0, 7.5 - (time.monotonic() - console.started)))
        beats = _beats(stream, 0)
        console.end("train_and_register", 7.5)
    assert 2 <= len(beats) <= 4, beats
    assert "router selection started" in beats[0] and not any("started" in b for b in beats[1:])


def test_heartbeat_keeps_long_messages_whole(tmp_path, capfd):
    message = " ".join(["candidate"] * 40)
    with output_to_file(tmp_path / "run.log") as terminal, ProgressConsole(terminal, total=1, heartbeat_s=1) as console:
        console.begin("train_and_register")
        console.note("router_selection", message)
        time.sleep(2.6)
        console.end("train_and_register", 2.6)
    out = capfd.readouterr().out.splitlines()
    assert max(map(len, out)) <= 120  # wrapped at words, each line fits a terminal
    first = next(i for i, line in enumerate(out) if "running for" in line)
    rest = out[first + 1:]
    wrapped = rest[:next((i for i, line in enumerate(rest) if not line.startswith("        ")), len(rest))]
    beat = " ".join(line.strip() for line in [out[first], *wrapped])
    assert f"router_selection: {message}" in beat


def test_counts_become_a_counter_with_a_rate_in_plain_lines(tmp_path, capfd):
    """Off a terminal: heartbeat lines name the count and its rate when it moved, the stage line its
    final count; a count that did not move is not repeated."""
    with output_to_file(tmp_path / "run.log") as terminal, ProgressConsole(terminal, total=1, heartbeat_s=1) as console:
        assert not console.live
        console.begin("train_and_register")
        console.step_start("knn_estimator")
        console.note("knn_estimator", format_count("embedding (right truncation)", 100, 1000, "prompts"))
        time.sleep(0.5)
        console.note("knn_estimator", format_count("embedding (right truncation)", 600, 1000, "prompts"))
        time.sleep(1.6)
        console.note("knn_estimator", format_count("embedding (right truncation)", 1000, 1000, "prompts"))
        time.sleep(3.2)
        console.end("train_and_register", 5.3)
    lines = capfd.readouterr().out.splitlines()
    beats = [line for line in lines if "running for" in line]
    counted = [b for b in beats if "/1000 prompts" in b]
    # a count with its rate once it has moved (a beat that lands before the second report, as one may on a
    # loaded machine, has one report and so no rate yet)
    rated = [b for b in counted if re.search(r"knn_estimator: embedding \(right truncation\) \d+/1000 prompts, [\d.]+/s", b)]
    assert rated and all(b in rated or "100/1000 prompts" in b for b in counted), counted
    # 600 → 1000 prompts took about 1.6 s: the rate is over the reports, not since the stage began
    rate = float(re.search(r"1000/1000 prompts, ([\d.]+)/s", "\n".join(beats)).group(1))
    assert 100 < rate < 2000
    # each count is named once: beats after the last report only say the stage is alive
    assert len(counted) == len({b.split(" · ", 1)[1] for b in counted})
    assert "\r" not in "\n".join(lines)
    assert re.search(r"^\[1/1\] train_and_register +5\.3s  embedding \(right truncation\) 1000/1000 prompts, [\d.]+/s$", lines[-1])


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_live_bar_redrawn_in_place(monkeypatch):
    # the bar is cut to the terminal's width; a 120-column terminal, whatever the machine running the suite
    monkeypatch.setenv("COLUMNS", "120")
    terminal = _Terminal()
    with ProgressConsole(terminal, total=2) as console:
        assert console.live
        console.begin("generate_and_score[tiny-gpt2]")
        console.step_start("responses")
        for done in (10, 20, 30, 40):
            console.note("responses", format_count("tiny-gpt2", done, 40, "prompts"))
            time.sleep(0.25)
        # redraws are throttled; the heartbeat's, once a second, shows the last count (bounded wait:
        # on a busy machine, the suite's other worker say, it may come later than 0.25 s)
        deadline = time.monotonic() + 10
        while "40/40 prompts" not in terminal.getvalue() and time.monotonic() < deadline:
            time.sleep(0.1)
        console.end("generate_and_score[tiny-gpt2]", 1.0)
    text = terminal.getvalue()
    assert "\r\x1b[K" in text
    assert "[####################] responses: tiny-gpt2 40/40 prompts" in text
    # the stage line starts on a cleared line and the bar is gone at the end
    last = text.split("\r\x1b[K")[-1]
    assert last == "" or last.startswith("[1/2] generate_and_score[tiny-gpt2]")
    assert "[1/2] generate_and_score[tiny-gpt2]" in text and text.rstrip("\r\x1b[K").endswith("/s\n")


def test_counts_have_one_shape():
    assert parse_count(format_count("router selection", 3, 8, "candidates", "(knn_k: cv score 0.41)")) == (3, 8, "candidates")
    assert parse_count("tiny-gpt2@cpu: 12/40 batches") == (12, 40, "batches")
    assert parse_count("ratio 3.5/4 so far") is None and parse_count("no count here") is None
    lines: list[str] = []
    counted = Counted(lines.append, "embedding", 10_000, "prompts", every_s=60)
    for done in range(1, 10_001):
        counted.count(done)
    # throttled, but the start and the last are never lost
    assert lines == ["embedding: 0/10000 prompts", "embedding: 10000/10000 prompts"]
