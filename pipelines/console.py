"""What `python -m routeforge.pipelines.run` (and `make demo`) shows on the terminal: one line per stage.

Everything else a run prints (Dagster's own event lines, library warnings, Trainer and TorchRL
output, progress bars, native messages from ONNX export) goes to a log file: the process's
standard output and error descriptors are pointed at it for the duration of the run, so even
output from C extensions and child processes lands there, not on the terminal. The terminal keeps
a duplicate of the original descriptor, written only by `ProgressConsole`.

A Dagster logger (`progress_logger`, registered in the code location's definitions) forwards step
and asset events to the active console. Counts the steps report (`core.progress`: prompts
generated or embedded, candidates, folds, episodes) become a counter with a rate: a live bar on a
terminal; elsewhere a heartbeat line after `HEARTBEAT_S` seconds of quiet naming what changed
since the last one (the count, the latest message, whole), so no stretch of the run is silent; where
nothing changed, "still running" alone comes ever less often (10, 20, 40, then every 80 s), so a
long quiet step is a few lines in a CI log, not one every ten seconds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import dagster as dg
from routeforge.artifacts.cli.narrow_output import narrow
from routeforge.core.progress import parse_count, parse_counted

HEARTBEAT_S = 10.0
QUIET_BACKOFF_STEPS = 3  # a stage with no news says it is alive every 10, 20, 40, then 80 s
LIVE_REDRAW_S = 0.2  # the live bar is redrawn at most this often
MIN_RATE_SPAN_S = 0.5  # a rate over a shorter span is noise

# Progress bars and library chatter that would fill the log file with carriage returns.
QUIET_ENV = {
    "TQDM_DISABLE": "1",
    "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
}

_active: ProgressConsole | None = None


@dataclass
class _Count:
    """The latest `done/total unit` a step reported (`core.progress`), and when counting began."""

    step: str | None
    what: str
    unit: str
    done: int
    total: int
    first_done: int
    first_t: float
    t: float
    step_started: float

    def rate(self) -> float | None:
        """Units per second: between the first and the latest report, or since the step began when
        there has been only one (a step that reports its count once, at the end); None over less
        than `MIN_RATE_SPAN_S`, where it would mean nothing."""
        if self.t - self.first_t >= MIN_RATE_SPAN_S and self.done > self.first_done:
            return (self.done - self.first_done) / (self.t - self.first_t)
        elapsed = self.t - self.step_started
        return self.done / elapsed if elapsed >= MIN_RATE_SPAN_S and self.done else None

    def text(self) -> str:
        rate = self.rate()
        return (f"{self.what} " if self.what else "") + f"{self.done}/{self.total} {self.unit}" + \
            (f", {_per_second(rate)}" if rate else "")


def _per_second(rate: float) -> str:
    return f"{rate:.2g}/s" if rate < 1 else f"{rate:.1f}/s" if rate < 100 else f"{rate:.0f}/s"


class ProgressConsole:
    """Stage lines with timings; within a stage, the counts its steps report (`core.progress`) with
    their rate: as a live bar redrawn in place on a terminal, as plain heartbeat lines (every
    `heartbeat_s` of quiet, naming news once) anywhere else, such as a file or a CI log."""

    def __init__(self, stream: TextIO, total: int, heartbeat_s: float = HEARTBEAT_S, live: bool | None = None):
        self.stream, self.total, self.heartbeat_s = stream, total, heartbeat_s
        self.live = bool(live if live is not None else getattr(stream, "isatty", lambda: False)())
        self.index = 0
        self.label: str | None = None
        self.started = self.last_print = time.monotonic()
        self.latest = ""
        self.counts: dict[tuple[str | None, str, str], _Count] = {}
        self.current: _Count | None = None
        self.step_started: dict[str | None, float] = {}
        self._drawn = False
        self._last_draw = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="routeforge-heartbeat", daemon=True)

    def print(self, line: str) -> None:
        """One line on the terminal, at most 120 characters (`artifacts.cli.narrow_output`: a stage line's
        counts cut with …, a heartbeat's message wrapped); the run's log file has everything."""
        with self._lock:
            self._clear_live()
            self.stream.write(narrow(line) + "\n")
            self.last_print = time.monotonic()
            self._draw_live(force=True)
            self.stream.flush()

    def begin(self, label: str) -> None:
        self.index += 1
        self.label, self.started, self.latest = label, time.monotonic(), ""
        self.counts, self.current, self.step_started = {}, None, {}
        self.last_print = self.started

    def end(self, label: str, seconds: float, summary: str = "") -> None:
        counted = "; ".join(f"{c.step}: {c.text()}" if c.step and len(self.counts) > 1 else c.text()
                            for c in self.counts.values())
        self.label = None
        tail = "  ".join(part for part in (summary, counted) if part)
        self.print(f"[{self.index}/{self.total}] {label:<38} {seconds:7.1f}s" + (f"  {tail}" if tail else ""))

    def step_start(self, step: str | None) -> None:
        self.step_started[step] = time.monotonic()
        self.note(step, "started")

    def note(self, step: str | None, message: str) -> None:
        """Record the latest message of the running stage, and the count it carries, if any."""
        first = message.splitlines()[0] if message else ""
        self.latest = f"{step}: {first}" if step else first
        count = parse_counted(first)
        if count is None:
            return
        what, done, total, unit = count
        now = time.monotonic()
        key = (step, what, unit)
        known = self.counts.get(key)
        if known is None or done < known.done or total != known.total:  # a new count (a new loop)
            known = _Count(step, what, unit, done, total, done, now, now, self.step_started.get(step, self.started))
            self.counts[key] = known
        known.done, known.t = done, now
        self.current = known
        if self.live:
            with self._lock:
                self._draw_live()

    def status(self) -> str:
        """The running stage in one line: elapsed time and its current count with its rate."""
        now = time.monotonic()
        line = f"      … {self.label} {now - self.started:.0f}s"
        if self.current is not None:
            c = self.current
            filled = int(20 * min(1.0, c.done / c.total))
            line += f" [{'#' * filled}{'.' * (20 - filled)}] " + (f"{c.step}: " if c.step else "") + c.text()
        return line

    def _columns(self) -> int:
        """The width of the terminal this console draws on: `$COLUMNS` first, then the stream's own
        terminal (not the process's stdout, which may be another terminal or a pipe), else 100."""
        if os.environ.get("COLUMNS", "").isdigit():
            return int(os.environ["COLUMNS"])
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, OSError, ValueError):
            return 100

    def _draw_live(self, force: bool = False) -> None:
        """Redraw the live line in place (terminal only; the caller holds the lock)."""
        if not self.live or self.label is None:
            return
        now = time.monotonic()
        if not force and now - self._last_draw < LIVE_REDRAW_S:
            return
        width = self._columns() - 1
        self.stream.write("\r\x1b[K" + self.status()[:width])
        self.stream.flush()
        self._drawn, self._last_draw = True, now

    def _clear_live(self) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[K")
            self._drawn = False

    def _beat(self) -> None:
        shown: tuple = (None, None)  # what the last heartbeat named: a stale message or count is not repeated
        quiet, stage = 0, None  # heartbeats in a row with no news in this stage: each waits twice the last
        while not self._stop.wait(1.0):
            now = time.monotonic()
            if self.label is None:
                continue
            if self.live:
                with self._lock:
                    self._draw_live(force=True)
                continue
            if self.label != stage:
                quiet, stage = 0, self.label
            latest, current = self.latest, self.current
            count = (f"{current.step}: " if current.step else "") + current.text() if current is not None else None
            news = []
            if count is not None and (current, current.done) != shown[1]:
                news.append(count)
            # the latest message, unless it is the count just named or was named before
            if latest and latest != shown[0] and parse_count(latest) is None:
                news.append(latest)
            # news after `heartbeat_s` of quiet; "still running" alone at 1, 2, 4, then 8 × that
            if now - self.last_print < self.heartbeat_s * (1 if news else 2 ** min(quiet, QUIET_BACKOFF_STEPS)):
                continue
            quiet = 0 if news else quiet + 1
            shown = (latest, (current, current.done) if current is not None else None)
            self.print(f"      … {self.label} running for {now - self.started:.0f}s" + "".join(f" · {n}" for n in news))

    def __enter__(self) -> ProgressConsole:
        global _active
        _active = self
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        global _active
        self._stop.set()
        self._thread.join(timeout=2)
        with self._lock:
            self._clear_live()
            self.stream.flush()
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
                console.step_start(meta.get("step_key"))
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
