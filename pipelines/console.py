"""What `python -m routeforge.pipelines.run` (and `make demo`) shows on the terminal: one line per stage.

Everything else a run prints (Dagster's own event lines, library warnings, Trainer and TorchRL
output, progress bars, native messages from ONNX export) goes to a log file: the process's
standard output and error descriptors are pointed at it for the duration of the run, so even
output from C extensions and child processes lands there, not on the terminal. The terminal keeps
a duplicate of the original descriptor, written only by `ProgressConsole`.

A Dagster logger (`progress_logger`, registered in the code location's definitions) forwards step
and asset events to the active console; a heartbeat thread repeats the latest message of a stage
that has been quiet for `HEARTBEAT_S` seconds, so no stretch of the run is silent for longer.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import dagster as dg

HEARTBEAT_S = 10.0

# Progress bars and library chatter that would fill the log file with carriage returns.
QUIET_ENV = {
    "TQDM_DISABLE": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
}

_active: ProgressConsole | None = None


class ProgressConsole:
    """Stage lines with timings, plus a heartbeat naming what a long stage is doing."""

    def __init__(self, stream: TextIO, total: int, heartbeat_s: float = HEARTBEAT_S):
        self.stream, self.total, self.heartbeat_s = stream, total, heartbeat_s
        self.index = 0
        self.label: str | None = None
        self.started = self.last_print = time.monotonic()
        self.latest = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="routeforge-heartbeat", daemon=True)

    def print(self, line: str) -> None:
        with self._lock:
            self.stream.write(line + "\n")
            self.stream.flush()
            self.last_print = time.monotonic()

    def begin(self, label: str) -> None:
        self.index += 1
        self.label, self.started, self.latest = label, time.monotonic(), ""
        self.last_print = self.started

    def end(self, label: str, seconds: float, summary: str = "") -> None:
        self.label = None
        tail = f"  {summary}" if summary else ""
        self.print(f"[{self.index}/{self.total}] {label:<38} {seconds:7.1f}s{tail}")

    def note(self, step: str | None, message: str) -> None:
        """Record the latest message of the running stage (shown by the heartbeat only)."""
        first = message.splitlines()[0] if message else ""
        self.latest = f"{step}: {first}" if step else first

    def _beat(self) -> None:
        shown = None  # the message the last heartbeat named: a stale one is not repeated
        while not self._stop.wait(1.0):
            now = time.monotonic()
            if self.label is not None and now - self.last_print >= self.heartbeat_s:
                latest = self.latest
                news = f" · {textwrap.shorten(latest, 160, placeholder=' …')}" if latest and latest != shown else ""
                shown = latest
                self.print(f"      … {self.label} running for {now - self.started:.0f}s{news}")

    def __enter__(self) -> ProgressConsole:
        global _active
        _active = self
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        global _active
        self._stop.set()
        self._thread.join(timeout=2)
        _active = None


class _ForwardToConsole(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        console = _active
        meta = getattr(record, "dagster_meta", None)
        if console is None or not meta:
            return
        event = meta.get("dagster_event")
        if event is not None:
            if event.event_type_value == "STEP_START":
                console.note(meta.get("step_key"), "started")
            return
        console.note(meta.get("step_key"), meta.get("orig_message", ""))


@dg.logger(description="Forwards step and asset messages to the terminal's stage lines (routeforge.pipelines.run).")
def progress_logger(init_context: dg.InitLoggerContext) -> logging.Logger:
    logger = logging.Logger("routeforge.progress", level=logging.INFO)
    logger.addHandler(_ForwardToConsole())
    return logger


@contextlib.contextmanager
def output_to_file(path: Path) -> Iterator[TextIO]:
    """Point descriptors 1 and 2 at `path` and yield a stream to the original terminal."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(saved_out), "w", buffering=1, encoding="utf-8", errors="replace")
    previous_env = {k: os.environ.get(k) for k in QUIET_ENV}
    saved_streams = sys.stdout, sys.stderr
    with open(path, "ab", buffering=0) as log, open(path, "a", buffering=1, encoding="utf-8") as text:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        # Python-level streams too, for hosts that replaced them (pytest's capture, notebooks)
        sys.stdout = sys.stderr = text
        os.environ.update(QUIET_ENV)
        try:
            yield terminal
        finally:
            sys.stdout.flush()
            sys.stdout, sys.stderr = saved_streams
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved_out, 1)
            os.dup2(saved_err, 2)
            os.close(saved_out)
            os.close(saved_err)
            terminal.close()
            for key, value in previous_env.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def silence_progress_bars() -> None:
    """Turn off the progress bars of libraries already imported (the environment covers later ones);
    warnings and library loggers need nothing: they write to stderr, which is the log file."""
    with contextlib.suppress(ImportError):
        import transformers

        transformers.utils.logging.disable_progress_bar()
    with contextlib.suppress(ImportError):
        import datasets

        datasets.disable_progress_bars()
