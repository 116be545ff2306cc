"""Countable work (prompts embedded, candidates cross-validated, episodes trained) as log lines of one
shape, `<what>: <done>/<total> <unit>[ detail]`, written by `Counted` and read back by `parse_count`.

The shape is the contract between the library code that does the work and whatever shows it: the
Dagster event log stores the lines as they are (readable in the UI), and `routeforge.pipelines.run`'s
console turns them into a counter with a rate and, on a terminal, a live bar. Library code stays
free of Dagster and of any console: it takes a plain `log(str)` callable.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

# "<done>/<total> <unit>", the unit a word (letters, digits, -, _), not preceded by a word character or
# a dot (so "3.5/4" or "v1/2" are not counts)
_COUNT = re.compile(r"(?<![\w./])(\d+)/(\d+) ([A-Za-z][\w-]*)")


def format_count(what: str, done: int, total: int, unit: str, detail: str = "") -> str:
    """The one shape of a progress line: `what: done/total unit` and an optional detail after it."""
    return f"{what}: {done}/{total} {unit}" + (f" {detail}" if detail else "")


def parse_count(message: str) -> tuple[int, int, str] | None:
    """(done, total, unit) of the first count in `message`'s first line, None when it has none."""
    found = parse_counted(message)
    return None if found is None else found[1:]


def parse_counted(message: str) -> tuple[str, int, int, str] | None:
    """(what, done, total, unit): `parse_count` with the words before the count (its `what`)."""
    line = message.split("\n", 1)[0]
    match = _COUNT.search(line)
    if match is None or int(match.group(2)) <= 0:
        return None
    return line[:match.start()].strip().rstrip(":").strip(), int(match.group(1)), int(match.group(2)), match.group(3)


class Counted:
    """Reports `done` of `total` units to `log`, at most once every `every_s` seconds (a fast loop
    would otherwise flood the event log) but always at the start (0, when the work begins: what a
    rate is measured from) and for the last unit.

    `count(done, detail)` sets the count; `advance(n, detail)` adds to it."""

    def __init__(self, log: Callable[[str], None] | None, what: str, total: int, unit: str, every_s: float = 5.0):
        self.log, self.what, self.total, self.unit, self.every_s = log, what, total, unit, every_s
        self.done = 0
        self._last_logged: float | None = None
        self.count(0)

    def count(self, done: int, detail: str = "") -> None:
        self.done = done
        if self.log is None or self.total <= 0:
            return
        now = time.monotonic()
        final = done >= self.total
        if final or self._last_logged is None or now - self._last_logged >= self.every_s:
            self._last_logged = now
            self.log(format_count(self.what, done, self.total, self.unit, detail))

    def advance(self, n: int = 1, detail: str = "") -> None:
        self.count(self.done + n, detail)
