"""README.md's console commands, for the test that runs them as shown (tests/test_end_to_end.py) and
the CLI benchmark (`benchmarks/cli_speed.py`)."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_console_commands(path: Path = README) -> list[tuple[str, list[str]]]:
    """(command, output lines shown) of each `$ ` line of README.md's console blocks, a trailing `\\`
    joining the next line; `make demo` is left out (the module's `demo` fixture is that run)."""
    bodies, body, fenced = [], None, False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            if fenced and body is not None:
                bodies.append("\n".join(body))
            body = [] if not fenced and line.strip() in ("```", "```console") else None
            fenced = not fenced
        elif body is not None:
            body.append(line)
    out = []
    for body in bodies:
        if not body.startswith("$ "):
            continue
        for chunk in ("\n" + body).split("\n$ ")[1:]:
            lines = chunk.split("\n")
            command = lines.pop(0)
            while command.endswith("\\"):
                command = command[:-1] + " " + lines.pop(0).strip()
            if command != "make demo":
                out.append((command, [line for line in lines if line.strip()]))
    return out
