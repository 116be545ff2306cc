"""The installed layout of `routeforge`, built from the checkout, for tools that read files, not imports.

The distribution maps the repository's root folders under one package (pyproject.toml,
`[tool.setuptools.package-dir]`). An editable install resolves that mapping with an import hook,
which Python honours but file-walking tools do not: import-linter (grimp) looks for
`routeforge/pipelines/` on disk and finds nothing. This builds that folder, `routeforge/` with one
entry per mapped package (symbolic links, or copies where a test edits them), from the same table the
wheel is built from, so `lint-imports` checks exactly the layout users install.

    python -m tools.package_view lint     # lint-imports on the installed layout (`make lint`)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def package_dirs(repo: Path = REPO) -> dict[str, Path]:
    """{dotted package: its folder in the checkout}, for `routeforge` and each mapped top folder."""
    table = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {name: repo / folder for name, folder in table.items()}


def build_view(dst: Path, repo: Path = REPO, copy: bool = False) -> Path:
    """`dst/routeforge/...` as installed; `copy=True` copies the sources (without caches) so that a
    caller can edit them without touching the checkout. Returns `dst`, the folder to put on the path."""
    for name, folder in sorted(package_dirs(repo).items()):
        target = dst.joinpath(*name.split("."))
        if name == "routeforge":  # the root package: its own files, beside the mapped subfolders
            target.mkdir(parents=True, exist_ok=True)
            for f in folder.iterdir():
                if f.is_file():
                    (shutil.copy if copy else os.symlink)(f, target / f.name)
        elif copy:
            shutil.copytree(folder, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            target.symlink_to(folder, target_is_directory=True)
    return dst


def lint(view: Path, repo: Path = REPO, extra: list[str] = ()) -> subprocess.CompletedProcess:
    """`lint-imports` with `view` first on the path and the checkout's contracts; output captured."""
    env = {**os.environ, "PYTHONPATH": str(view)}
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, str(repo / "pyproject.toml"), "--no-cache",
                           *extra], cwd=view, env=env, capture_output=True, text=True, timeout=600)


def main(argv: list[str]) -> int:
    if argv[:1] != ["lint"]:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="routeforge-view-") as tmp:
        result = lint(build_view(Path(tmp)), extra=argv[1:])
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
