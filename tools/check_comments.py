"""Fail on a comment or docstring of the package's code that quotes a measured result or an issue (run by
`make lint`).

Why: a docstring that says "19% below llm-d's" or "(issue 52)" goes stale the day the number moves or the
issue closes, and nobody edits a docstring when a benchmark is rerun. Results live in docs/results/ (written
by `benchmarks/`), history in CHANGELOG.md and the issues; code says why it is as it is, and may point at a
results page by name. The rules, over every comment and docstring of the package's folders (not tests/
nor benchmarks/, whose docstrings say what they measure), sentence by sentence:

- `issue N` is refused;
- a number with a unit (`%`, `×`, ms, s, req/s, prompts/s, GB, ...) is refused in a sentence that cites a
  measurement (`docs/results`, `results.md`, `benchmarks/`, "measured") or compares against something
  ("faster", "slower", "better than", "N% below ..."): the result, quoted.

A setting's value ("a 600 s timeout", "99% of requests within the SLO") and a paper's number cited by its
section are neither, and pass.

    python -m tools.check_comments        # every hit, `path:line: sentence`; exit 1 when there is one
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FOLDERS = ("pipelines", "assets", "fleet", "training", "profiling", "core", "prompts", "generation", "scoring",
           "artifacts", "registry", "gateway", "src")
ISSUE = re.compile(r"\bissues? \d+", re.IGNORECASE)
QUANTITY = re.compile(r"\d[\d.,]*\s?(?:%|×|x faster|x slower|ms\b|µs\b|s\b|seconds\b|minutes\b|req/s|requests/s|"
                      r"prompts/s|tokens/s|texts/s|GB\b|GiB\b|MB\b|MiB\b)")
CITES = re.compile(r"docs/results|results\.md|benchmarks/|\bmeasured\b|\bfaster\b|\bslower\b|\bbetter than\b|"
                   r"\bworse than\b|\d\s?%[^.;]*\b(?:below|above|lower|higher)\b", re.IGNORECASE)
SENTENCE = re.compile(r"(?<=[.;])\s+(?=[A-Z(`])")


def _texts(source: str) -> list[tuple[int, str]]:
    """(first line, text) of each run of comment lines and each docstring of `source`."""
    runs: list[list[tuple[int, str]]] = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        line, text = tok.start[0], tok.string.lstrip("#").strip()
        if runs and runs[-1][-1][0] == line - 1:
            runs[-1].append((line, text))
        else:
            runs.append([(line, text)])
    out = [(run[0][0], " ".join(t for _, t in run)) for run in runs]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                for offset, paragraph in _paragraphs(doc):
                    out.append((node.body[0].lineno + offset, paragraph))
    return out


def _paragraphs(doc: str) -> list[tuple[int, str]]:
    out, start, lines = [], 0, []
    for i, line in enumerate(doc.splitlines() + [""]):
        if line.strip():
            if not lines:
                start = i
            lines.append(line.strip())
        elif lines:
            out.append((start, " ".join(lines)))
            lines = []
    return out


def problems(path: Path) -> list[str]:
    """Each sentence of `path`'s comments and docstrings that quotes an issue or a measured result."""
    found = []
    rel = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    for line, text in _texts(path.read_text()):
        for sentence in SENTENCE.split(text):
            if ISSUE.search(sentence):
                found.append(f"{rel}:{line}: names an issue: {sentence[:160]}")
            elif QUANTITY.search(sentence) and CITES.search(sentence):
                found.append(f"{rel}:{line}: quotes a result: {sentence[:160]}")
    return found


def main() -> int:
    found = [p for folder in FOLDERS for path in sorted((REPO / folder).rglob("*.py")) for p in problems(path)]
    for line in found:
        print(line)
    if found:
        print(f"comments check: {len(found)} comment(s) or docstring(s) quote a result or an issue: say why the "
              "code is so and point at the results page by name (docs/results/...), without its numbers",
              file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
