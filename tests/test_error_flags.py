"""Every `--flag` an error message names is an option of a routeforge command: an error that sends
the user to a flag that does not exist (add-model's `--max-rows`, once) is a dead end."""

from __future__ import annotations

import ast
import contextlib
import io
import re

import click
import pytest
from routeforge.artifacts.cli.commands import main

from tests.conftest import REPO

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]+")
SOURCE_DIRS = ("pipelines", "assets", "training", "profiling", "core", "prompts", "generation", "scoring",
               "artifacts", "registry", "fleet", "src")
# entry points parsed by argparse rather than click (`python -m …`)
ARGPARSE_MAINS = ("routeforge.pipelines.run", "routeforge.fleet.generate")


def _error_texts():
    """(where, text) of every string in a `raise` expression or in a `click.echo(…, err=True)` call."""
    for folder in SOURCE_DIRS:
        for path in sorted((REPO / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                said = None
                if isinstance(node, ast.Raise) and node.exc is not None:
                    said = node.exc
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "echo"
                      and any(k.arg == "err" for k in node.keywords)):
                    said = node
                if said is None:
                    continue
                for sub in ast.walk(said):
                    if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                        yield f"{path.relative_to(REPO)}:{node.lineno}", sub.value


def _click_options(command: click.Command, ctx: click.Context) -> set[str]:
    names = {o for p in command.params if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts)}
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            names |= _click_options(sub, click.Context(sub, parent=ctx, info_name=name))
    return names


def _argparse_options(module: str) -> set[str]:
    import importlib

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        importlib.import_module(module).main(["--help"])
    return set(FLAG.findall(out.getvalue()))


def test_every_flag_an_error_names_is_an_option_of_some_command():
    options = _click_options(main, click.Context(main, info_name="routeforge"))
    for module in ARGPARSE_MAINS:
        options |= _argparse_options(module)
    assert {"--tracking-uri", "--wait", "--log-file", "--signing-key"} <= options  # the walk found the commands
    named = [(where, flag) for where, text in _error_texts() for flag in FLAG.findall(text)]
    assert len(named) > 10
    unknown = [f"{where}: {flag}" for where, flag in named if flag not in options]
    assert not unknown, "errors name flags no command has:\n" + "\n".join(unknown)
