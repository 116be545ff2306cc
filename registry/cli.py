"""`routeforge bundle promote` and `routeforge bundle rollback`: registry writes, beside the runtime.

Registered into the runtime CLI's `bundle` group through the `routeforge.bundle_commands` entry
point group (pyproject.toml), so `routeforge bundle verify` never imports this.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from routeforge.artifacts.bundle.registry import check_reachable
from routeforge.artifacts.bundle.verification import BundleVerificationError
from routeforge.artifacts.cli.commands import TRACKING_OPTION as _TRACKING
from routeforge.artifacts.cli.commands import signature_options
from routeforge.artifacts.common import temporary
from routeforge.registry.accounts import Account, provision
from routeforge.registry.lease import release_lock
from routeforge.registry.release import ModelRegistry, gate
from routeforge.registry.release import rollback as roll_back


def _progress(line: str) -> None:
    """The gate's stage lines, on stderr: stdout keeps the one verdict line per version."""
    click.echo(line, err=True)


def _registry(name: str, tracking_uri: str | None):
    if not tracking_uri:
        raise click.UsageError("no tracking URI: pass --tracking-uri or set MLFLOW_TRACKING_URI")

    check_reachable(tracking_uri)
    return ModelRegistry(tracking_uri, name)


@click.command()
@click.argument("name")
@click.option("--version", "version", default=None, help="the version to promote (default: the latest)")
@signature_options
@click.option("--force", is_flag=True, help="promote even where the rules say no (needs --reason)")
@click.option("--reason", default=None, help="why; recorded on the model version with who asked")
@_TRACKING
def promote(name: str, version: str | None, public_key: Path | None, allow_unsigned: bool, force: bool,
            reason: str | None,
            tracking_uri: str | None) -> None:
    """Gate VERSION of NAME against the current champion on the frozen evaluation set, with the
    rules recorded at its registration (the pipeline's release gate), and move `champion` if it
    passes; the decision and its reasons are recorded on the version either way. Exit 1 when held."""

    if force and not (reason and reason.strip()):
        raise click.UsageError("--force needs --reason: a forced promotion records who asked and why")
    registry = _registry(name, tracking_uri)
    try:
        version = version or registry.latest_version()
        with release_lock(registry.tracking_uri, name), \
                temporary.scoped("promote") as tmp:
            decision = gate(registry, version, public_key, Path(tmp), force=force, reason=reason,
                            allow_unsigned=allow_unsigned, log=_progress)
    except (ValueError, BundleVerificationError) as exc:
        click.echo(f"FAILED: {exc}", err=True)
        sys.exit(1)
    verdict = "promoted to champion" if decision.promote else "held (stays challenger)"
    click.echo(f"{name} version {version}: {verdict}; " + "; ".join(decision.reasons))
    sys.exit(0 if decision.promote else 1)


@click.command()
@click.argument("name")
@click.option("--reason", default=None, help="why; recorded on the version rolled back from")
@_TRACKING
def rollback(name: str, reason: str | None, tracking_uri: str | None) -> None:
    """Move NAME's `champion` alias back to the previous champion."""
    registry = _registry(name, tracking_uri)
    try:
        with release_lock(registry.tracking_uri, name):
            current, previous = roll_back(registry, reason)
    except ValueError as exc:
        click.echo(f"FAILED: {exc}", err=True)
        sys.exit(1)
    click.echo(f"{name}: champion moved back from version {current} to version {previous}")




@click.command("gate")
@click.argument("name")
@click.option("--version", "version", default=None, help="the version to gate (default: every ungated one)")
@signature_options
@_TRACKING
def gate_command(name: str, version: str | None, public_key: Path | None, allow_unsigned: bool,
                 tracking_uri: str | None) -> None:
    """Gate the versions of NAME that were registered but never gated (a pipeline run stopped between
    registration and its gate), oldest first, with the rules recorded at their registration. A version
    whose asset checks were never recorded counts as failing them. Exit 1 when any is held."""

    registry = _registry(name, tracking_uri)
    versions = [version] if version else registry.ungated_versions()
    if not versions:
        click.echo(f"{name}: every version has a gate decision")
        return
    held = False
    for v in versions:
        if registry.gated(v):
            raise click.UsageError(f"version {v} of {name} was gated already; use `bundle promote` to re-judge it")
        with release_lock(registry.tracking_uri, name), temporary.scoped("gate") as tmp:
            decision = gate(registry, v, public_key, Path(tmp), allow_unsigned=allow_unsigned, log=_progress)
        held |= not decision.promote
        verdict = "promoted to champion" if decision.promote else "held (stays challenger)"
        click.echo(f"{name} version {v}: {verdict}; " + "; ".join(decision.reasons))
    sys.exit(1 if held else 0)


@click.command("freeze-evaluation")
@click.argument("name")
@click.argument("evaluation", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--reason", required=True, help="why the frozen set is replaced; recorded with who and when")
@_TRACKING
def freeze_evaluation(name: str, evaluation: Path, reason: str, tracking_uri: str | None) -> None:
    """Replace NAME's frozen evaluation set with EVALUATION (parquet: text, task, quality/<model>;
    with reference, reference_meta and metric, `bundle add-model` checks a new model's labels):
    every later gate compares versions on it. Recorded in the registered model's
    `routeforge.evaluation_set_history` tag."""
    import pyarrow.parquet as pq

    columns = pq.read_schema(evaluation).names
    if "text" not in columns or not any(c.startswith("quality/") for c in columns):
        raise click.UsageError(f"{evaluation}: needs a `text` column and `quality/<model>` columns (has {columns})")
    registry = _registry(name, tracking_uri)
    with release_lock(registry.tracking_uri, name):
        sha = registry.replace_evaluation_set(evaluation, reason)
    click.echo(f"{name}: evaluation set replaced by {evaluation} (sha256 {sha[:12]}…); reason recorded")


@click.command("accounts")
@click.argument("name")
@click.option("--experiment", required=True, help="the fleet's MLflow experiment (registry.experiment)")
@click.option("--writer", "writer", default="routeforge-pipeline", show_default=True,
              help="the pipeline's account; its password is read from $ROUTEFORGE_WRITER_PASSWORD")
@click.option("--reader", "reader", default="routeforge-router", show_default=True,
              help="router services' account; its password is read from $ROUTEFORGE_READER_PASSWORD")
@_TRACKING
def accounts(name: str, experiment: str, writer: str, reader: str, tracking_uri: str | None) -> None:
    """As the MLflow admin (MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD), create or update
    the writer and reader accounts of an authenticated MLflow server and grant them registered model
    NAME and its experiment: the writer may register and move aliases, the reader only read.
    Passwords come from the environment, never the command line (it shows in process lists)."""
    import os


    if not tracking_uri:
        raise click.UsageError("no tracking URI: pass --tracking-uri or set MLFLOW_TRACKING_URI")
    passwords = {var: os.environ.get(var, "") for var in ("ROUTEFORGE_WRITER_PASSWORD", "ROUTEFORGE_READER_PASSWORD")}
    missing = [var for var, value in passwords.items() if len(value) < 12]
    if missing:
        raise click.UsageError(f"set {' and '.join(missing)} (at least 12 characters)")
    for line in provision(tracking_uri, name, experiment, Account(writer, passwords["ROUTEFORGE_WRITER_PASSWORD"]),
                          Account(reader, passwords["ROUTEFORGE_READER_PASSWORD"])):
        click.echo(line)
