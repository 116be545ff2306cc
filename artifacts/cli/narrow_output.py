"""Command output that fits a terminal: on a terminal, every line of standard output at most
`WIDTH` characters unless `routeforge --wide`; a pipe gets whole lines, as `ls` gives a pipe one name
a line (`$ROUTEFORGE_WIDE=0` narrows a pipe too, `=1` widens a terminal).

Why: `policies evaluate`'s table, `bundle inspect`'s lineage and a prediction's explanation ran to
289–407 characters, unreadable in a terminal and in a pasted issue. Prose lines are wrapped at word
boundaries with their indent plus two spaces; table rows (cells set apart by runs of spaces) are cut
with `…` (`--json` gives every column); JSON is never touched. Standard error is left alone: an
error is one line that names the problem and the fix, and a wrapped path would not paste.
"""

from __future__ import annotations

import re
import textwrap
from typing import TextIO

WIDTH = 120
_CELL_GAP = re.compile(r"\S {2,}\S")


def narrow(line: str, width: int = WIDTH) -> str:
    """`line` (no newline) as one or more lines of at most `width` characters (a single word longer
    than that, a path say, keeps its own line whole)."""
    if len(line) <= width or line.lstrip().startswith(("{", "[")):
        return line
    if len(_CELL_GAP.findall(line)) >= 2:  # a table row: its first columns, then …
        return line[:width - 1] + "…"
    indent = line[:len(line) - len(line.lstrip())]
    return textwrap.fill(line.strip(), width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=False, break_on_hyphens=False)


class NarrowStream:
    """A text stream that passes whole lines through `narrow` (the rest of the stream's interface is
    the wrapped stream's)."""

    def __init__(self, stream: TextIO, width: int = WIDTH):
        self._stream, self._width, self._pending = stream, width, ""

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self._stream.write(narrow(line, self._width) + "\n")
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._stream.write(narrow(self._pending, self._width))
            self._pending = ""
        self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)
