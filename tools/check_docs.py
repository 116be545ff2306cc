"""Resolve every code reference in README.md and docs/*.md against the tree (run by `make lint`).

Why: docs drift silently. A renamed module, a moved test file or a deleted benchmark leaves a
backticked name behind that nobody notices until a reader tries it. This check reads each
backticked span and fails on one that names something the tree does not have:

- a path whose first component is a top-level entry of the repository (`configs/demo.yaml`,
  `benchmarks/results/…`), or any slashed path ending in a source or data suffix, must exist
  (placeholders such as `<name>` match any one component);
- a bare file name with a source suffix (`gate.py`) must exist somewhere in the tree;
- a dotted name whose first two components are a project package and one of its modules
  (`routeforge.artifacts.deciding.heuristics.queue_biases`, `training.policies.load`) must resolve, the
  rest as names defined at the top level of that module (read from its syntax tree, not imported);
- `python -m X` must name a module of the project (another package's lives elsewhere);
- a relative Markdown link must reach a file, and its `#anchor` a heading of that file.

Dotted names that are not code (`registry.signing_key`, a config key; `routeforge.step`, a tag)
are told apart by their second component not being a module. Lines may opt out with
`<!-- docs-check: skip -->` for text that quotes a name on purpose (a changelog's old names).
Also fails on a doc over MAX_LINES lines, and on a capability table (docs/capabilities.md) that is
not one short row per capability: each row at most MAX_CAPABILITY_ROW characters, its state one of
STATES, linking its details, and no capability twice (a capability once called both "done" and
"not built", a row apart, is what this catches).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_LINES = 600
CAPABILITIES = REPO / "docs" / "capabilities.md"
MAX_CAPABILITY_ROW = 400
STATES = ("done", "partial", "not built")
# the folders mapped under `routeforge.` (pyproject's package-dir) and the other importable trees
PACKAGES = ("artifacts", "assets", "core", "generation", "pipelines", "profiling", "prompts", "registry",
            "scoring", "training", "benchmarks", "tools", "tests")
SUFFIXES = (".py", ".yaml", ".yml", ".json", ".md", ".toml", ".ts", ".lock", ".in", ".png", ".csv", ".jsonl",
            ".parquet", ".sh", ".txt")
SOURCE_SUFFIXES = (".py", ".ts", ".yaml", ".md", ".toml")
SKIP_MARK = "docs-check: skip"
TOP_LEVEL = {p.name for p in REPO.iterdir() if not p.name.startswith(".git")}
PLACEHOLDER = re.compile(r"<[^>]*>|…|\*|\{[^}]*\}")


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *[p for p in [REPO / "CHANGELOG.md"]
                                                                            if p.is_file()]]


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def anchors(doc: Path) -> frozenset[str]:
    fenced, found = False, set()
    for line in doc.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return frozenset(found)


def link_problems(doc: Path, text: str):
    """(line, problem) for each relative Markdown link whose file or heading is missing."""
    for number, line in enumerate(text.splitlines(), 1):
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if "://" in target or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            linked = (doc.parent / path).resolve() if path else doc
            if not linked.exists():
                yield number, f"links to {path}, which does not exist"
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                yield number, f"links to {path or doc.name}#{anchor}: no such heading"


def spans(text: str):
    """(line number, backticked text) of each inline code span outside fenced blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or SKIP_MARK in line:
            continue
        for match in re.finditer(r"`([^`]+)`", line):
            yield number, match.group(1).strip()


def _path_exists(reference: str) -> bool:
    """True when some path matches `reference`, each placeholder component matching any name."""
    reference = reference.rstrip("/")
    candidates = [REPO]
    for part in reference.split("/"):
        if part in ("", "."):
            continue
        if PLACEHOLDER.search(part):
            pattern = re.compile("^" + ".*".join(re.escape(p) for p in PLACEHOLDER.split(part)) + "$")
            candidates = [c for base in candidates if base.is_dir() for c in base.iterdir() if pattern.match(c.name)]
        else:
            candidates = [base / part for base in candidates if (base / part).exists()]
        if not candidates:
            return False
    return True


def _module_file(parts: list[str]) -> Path | None:
    folder = REPO / parts[0] if parts[0] != "routeforge" else REPO / "src" / "routeforge"
    path = folder.joinpath(*parts[1:])
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    return None


@cache
def _top_level_names(module: Path) -> frozenset[str]:
    tree = ast.parse(module.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def _dotted(reference: str) -> str | None:
    """None when `reference` resolves or is not a code reference; else what is missing."""
    parts = reference.removesuffix("()").split(".")
    if parts[0] == "routeforge" and len(parts) > 1 and parts[1] in PACKAGES:
        parts = parts[1:]
    if len(parts) < 2 or parts[0] not in PACKAGES or not all(p.isidentifier() for p in parts):
        return None
    if _module_file(parts[:2]) is None:
        return None  # `registry.signing_key`: a config key, not a module
    depth = max(i for i in range(2, len(parts) + 1) if _module_file(parts[:i]) is not None)
    module = _module_file(parts[:depth])
    rest = parts[depth:]
    if rest and rest[0] not in _top_level_names(module):
        return f"{'.'.join(parts[:depth])} defines no {rest[0]}"
    return None


def _python_m(module: str) -> str | None:
    """Only the project's own modules: another package's (`vllm.entrypoints…`) lives elsewhere."""
    parts = module.split(".")
    if parts[0] == "routeforge" and len(parts) > 1 and parts[1] in PACKAGES:
        parts = parts[1:]
    if parts[0] not in PACKAGES or PLACEHOLDER.search(module):
        return None
    return None if _module_file(parts) else f"no module {module}"


def _expand(reference: str) -> list[str]:
    """`a_{x,y}.png` as `a_x.png` and `a_y.png` (shell brace expansion, one level)."""
    match = re.search(r"\{([^{}]*,[^{}]*)\}", reference)
    if not match:
        return [reference]
    return [v for option in match.group(1).split(",")
            for v in _expand(reference[:match.start()] + option + reference[match.end():])]


def _ignored(reference: str) -> bool:
    """A path git ignores is an output a command makes (a benchmark's parquet), not a source."""
    return subprocess.run(["git", "check-ignore", "-q", reference], cwd=REPO).returncode == 0


def _path(reference: str) -> str | None:
    """A slashed path: `a/b.py`, `a/b.py:symbol`, `a/b.Symbol` (module then name)."""
    reference, _, symbol = reference.replace("::", ":").partition(":")
    folder, _, last = reference.rpartition("/")
    head, dot, tail = last.partition(".")
    module = REPO / folder / f"{head}.py"  # `training/embeddings.SAVE_EVERY`: a module, then a name
    if dot and not reference.endswith(SUFFIXES) and module.is_file():
        name = tail.split(".")[0]
        return None if name in _top_level_names(module) else f"{folder}/{head} defines no {name}"
    for one in _expand(reference):
        if not (_path_exists(one) or _ignored(one) or any(p.endswith("/" + one) for p in _all_paths())):
            return f"no file {one}"
    if symbol:
        module = REPO / reference
        if module.suffix == ".py" and symbol.split(".")[0] not in _top_level_names(module):
            return f"{reference} defines no {symbol}"
    return None


def problem(reference: str) -> str | None:
    """What is wrong with one backticked span, or None."""
    command = re.search(r"python -m ([\w.<>]+)", reference)
    if command:
        return _python_m(command.group(1))
    if " " in reference or "://" in reference or reference.startswith(("$", "~", "/", "-", "@", "models:")):
        return None
    if "/" in reference:
        first = reference.split("/")[0]
        if first in TOP_LEVEL or first == "..":
            return _path(reference)
        if reference.endswith(SOURCE_SUFFIXES):  # below some folder: `rl/teacher.py`, `src/safetensors.ts`
            return None if any(path.endswith("/" + reference) for path in _all_paths()) else f"no file {reference}"
        return None
    if reference.endswith(SOURCE_SUFFIXES) and re.fullmatch(r"\w[\w.-]*", reference):
        return None if reference in _all_names() else (
            f"no file named {reference} anywhere in the tree")
    if re.fullmatch(r"[\w.]+(\(\))?", reference):
        return _dotted(reference)
    return None


@cache
def _all_names() -> frozenset[str]:
    return frozenset(p.rsplit("/", 1)[-1] for p in _all_paths())


@cache
def _all_paths() -> tuple[str, ...]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split()
    return tuple(listed)


def capability_problems(text: str) -> list[tuple[int, str]]:
    """(line, problem) for the rows of the table headed `| capability | state |`."""
    out, seen, inside = [], {}, False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("| capability | state |"):
            inside = True
            continue
        if not inside or line.startswith("|---"):
            continue
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        state = cells[-1] if len(cells) >= 2 else ""
        details = re.search(r"\[details\]\(([^)]+)\)", state)
        if len(line) > MAX_CAPABILITY_ROW:
            out.append((number, f"capability row of {len(line)} characters, over {MAX_CAPABILITY_ROW}: say it in a "
                                "sentence or two and put the rest in its details"))
        if not state.startswith(STATES):
            out.append((number, f"capability state {state[:40]!r} does not start with one of {STATES}"))
        if details is None:
            out.append((number, "capability row links no [details](…)"))
        elif details.group(1) in seen:
            out.append((number, f"capability {details.group(1)} is in the table twice (line {seen[details.group(1)]}): "
                                "one row per capability, one state"))
        else:
            seen[details.group(1)] = number
    return out


def main() -> int:
    failures = []
    if CAPABILITIES.is_file():
        failures += [f"{CAPABILITIES.relative_to(REPO)}:{n}: {p}"
                     for n, p in capability_problems(CAPABILITIES.read_text())]
    for doc in documents():
        text = doc.read_text()
        lines = text.count("\n")
        if lines > MAX_LINES:
            failures.append(f"{doc.relative_to(REPO)}: {lines} lines, over {MAX_LINES}: split it")
        for number, wrong in link_problems(doc, text):
            failures.append(f"{doc.relative_to(REPO)}:{number}: {wrong}")
        for number, reference in spans(text):
            wrong = problem(reference)
            if wrong:
                failures.append(f"{doc.relative_to(REPO)}:{number}: `{reference}`: {wrong}")
    for failure in failures:
        print(failure)
    if failures:
        print(f"docs check: {len(failures)} reference(s) the tree does not have")
        return 1
    print(f"docs check: every code reference in {len(documents())} documents resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
