"""The package's imports of itself made inside functions, and what each keeps out of its module's import.

Why: an import inside a function hides a module's dependencies from its reader and was how a circle
among modules was held apart. Import-linter's contracts (`make lint`) now forbid any circle among
siblings, function-level imports included, so such an import can move to the top of its module
without a cycle; one stays inside its function only where it keeps a heavy dependency (torch,
Dagster, MLflow, transformers, ...) out of a module that is imported without needing it (the CLI's
start, the runtime's load). Each one that stays says so on its line, `# lazy: <what it keeps out>`,
and `benchmarks/lazy_imports.py` measures what it keeps out (the milliseconds its first call adds).

    python -m tools.lazy_imports          # every function-level import without its `# lazy:` reason; exit 1
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FOLDERS = ("artifacts", "assets", "core", "fleet", "gateway", "generation", "pipelines", "profiling", "prompts",
           "registry", "scoring", "training")
MARK = "# lazy:"


@dataclass(frozen=True)
class LazyImport:
    path: str  # relative to the repository
    line: int
    end_line: int
    importer: str  # the dotted module it is in
    imported: str  # the dotted module it imports
    reason: str | None  # its `# lazy:` comment, if any


def module_name(path: Path) -> str:
    """The dotted name a file of the checkout installs as (`artifacts/cli/commands.py` →
    `routeforge.artifacts.cli.commands`)."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["routeforge", *parts])


def function_imports(path: Path) -> list[LazyImport]:
    """The imports of `routeforge` inside the functions of one file."""
    text = path.read_text()
    lines = text.splitlines()
    found = []
    for fn in ast.walk(ast.parse(text)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("routeforge"):
                modules = [node.module]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names if a.name.startswith("routeforge")]
            else:
                continue
            span = lines[node.lineno - 1:node.end_lineno]
            reason = next((ln.split(MARK, 1)[1].strip() for ln in span if MARK in ln), None)
            for module in modules:
                found.append(LazyImport(path.relative_to(REPO).as_posix(), node.lineno, node.end_lineno,
                                        module_name(path), module, reason))
    return sorted(set(found), key=lambda i: (i.path, i.line, i.imported))


def every_function_import() -> list[LazyImport]:
    return [i for folder in FOLDERS for p in sorted((REPO / folder).rglob("*.py")) for i in function_imports(p)]


def main() -> int:
    found = every_function_import()
    bare = [i for i in found if not i.reason]
    for i in bare:
        print(f"{i.path}:{i.line}: {i.imported} imported inside a function without a `{MARK} <what it keeps out>`")
    print(f"{len(found)} function-level imports of routeforge, {len(bare)} without a reason")
    return 1 if bare else 0


if __name__ == "__main__":
    sys.exit(main())
