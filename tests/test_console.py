"""The quiet console of `python -m routeforge.pipelines.run`: stage lines on the terminal, everything else
(Python and native writes to stdout and stderr) in the log file, a heartbeat for quiet stages."""

from __future__ import annotations

import os
import sys
import time

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


def test_heartbeat_names_the_latest_message_of_a_quiet_stage(tmp_path, capfd):
    with output_to_file(tmp_path / "run.log") as terminal, ProgressConsole(terminal, total=1, heartbeat_s=1) as console:
        console.begin("train_and_register")
        console.note("router_selection", "router selection: 2/4 candidates\nsecond line")
        time.sleep(2.6)
        console.end("train_and_register", 2.6)
    lines = capfd.readouterr().out.splitlines()
    beats = [line for line in lines if "running for" in line]
    # the message once, in the first heartbeat; later beats of a quiet stage only say it is alive
    assert len(beats) >= 2 and "router_selection: router selection: 2/4 candidates" in beats[0]
    assert not any("candidates" in b for b in beats[1:])
    assert "second line" not in "\n".join(lines)
    assert lines[-1].startswith("[1/1] train_and_register")


def test_heartbeat_shortens_long_messages_at_a_word(tmp_path, capfd):
    with output_to_file(tmp_path / "run.log") as terminal, ProgressConsole(terminal, total=1, heartbeat_s=1) as console:
        console.begin("train_and_register")
        console.note("router_selection", " ".join(["candidate"] * 40))
        time.sleep(2.6)
        console.end("train_and_register", 2.6)
    beat = next(line for line in capfd.readouterr().out.splitlines() if "running for" in line)
    assert beat.endswith("candidate …") and len(beat) < 220
