"""`routeforge` command: inspect, verify, download bundles and query their KNN estimator."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from artifacts.loader import BundleVerificationError, fetch, load_bundle, read_manifest, verify_bundle
from artifacts.registry import download_bundle

_TRACKING = click.option(
    "--tracking-uri", envvar="MLFLOW_TRACKING_URI", default=None,
    help="MLflow tracking URI for models:/ references (default: $MLFLOW_TRACKING_URI).",
)


@click.group()
def main() -> None:
    """routeforge: router bundles trained by the routeforge pipeline."""


@main.group()
def bundle() -> None:
    """Work with router bundles (a folder or models:/<name>@<alias>)."""


@bundle.command()
@click.argument("ref")
@_TRACKING
def inspect(ref: str, tracking_uri: str | None) -> None:
    """Print the manifest summary: version, fleet, components and their metrics."""
    manifest = read_manifest(fetch(ref, tracking_uri=tracking_uri))
    click.echo(f"bundle {manifest.name} version {manifest.version} (schema {manifest.schema_version})")
    click.echo(f"created {manifest.created_at} by routeforge {manifest.code_version}")
    click.echo(f"fleet {manifest.fleet.name}: {', '.join(m.name for m in manifest.fleet.models)}")
    for comp in manifest.components:
        size = sum(f.bytes for f in comp.files)
        click.echo(f"  {comp.name} [{comp.kind}, {comp.format}] {len(comp.files)} files, {size:,} bytes")
        for key, value in sorted(comp.metrics.items()):
            click.echo(f"    {key} = {value:.6g}")
    click.echo(f"lineage: {json.dumps(manifest.lineage.model_dump(), sort_keys=True)}")


@bundle.command()
@click.argument("ref")
@click.option("--public-key", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              envvar="ROUTEFORGE_PUBLIC_KEY",
              help="Ed25519 public key (PEM) the manifest must be signed by ($ROUTEFORGE_PUBLIC_KEY); "
                   "without it only checksums are checked.")
@_TRACKING
def verify(ref: str, public_key: Path | None, tracking_uri: str | None) -> None:
    """Check schema version, every file's sha256 and (with --public-key) the manifest's signature;
    exit 1 naming the offending files or the reason the signature is refused."""
    try:
        manifest = verify_bundle(fetch(ref, tracking_uri=tracking_uri), public_key)
    except BundleVerificationError as exc:
        click.echo(f"FAILED: {exc}", err=True)
        sys.exit(1)
    n = sum(len(c.files) for c in manifest.components)
    signed = f"; signature by {public_key} valid" if public_key else " (signature not checked: no --public-key)"
    click.echo(f"OK: {manifest.name} version {manifest.version}, {n} files verified{signed}")


@bundle.command()
@click.argument("ref")
@click.argument("dst", type=click.Path(file_okay=False, path_type=Path))
@_TRACKING
def download(ref: str, dst: Path, tracking_uri: str | None) -> None:
    """Download a registered bundle into DST (not verified; run `verify` on DST)."""
    path = download_bundle(ref, dst, tracking_uri)
    click.echo(str(path))


@bundle.command()
@click.argument("ref")
@click.argument("prompts", nargs=-1, required=True)
@click.option("--lam", default=0.0, show_default=True, help="cost weight λ in quality − λ·cost")
@_TRACKING
def predict(ref: str, prompts: tuple[str, ...], lam: float, tracking_uri: str | None) -> None:
    """Predicted per-model quality, output tokens and cost for PROMPTS, and the chosen model: by the
    bundle's router where it has one (chosen by cross-validation), else by its KNN estimator."""
    loaded = load_bundle(ref, tracking_uri=tracking_uri)
    if any(c.kind == "router" for c in loaded.manifest.components):
        pred = loaded.router().predict(list(prompts))
        choice, estimator = pred.best_model(lam), "router"
    else:
        knn = loaded.knn_estimator()
        pred = knn.predict(list(prompts))
        choice, estimator = pred.best_model(lam, knn.prior), "knn_estimator"

    def number(value: float, digits: int) -> float | None:
        return None if value != value else round(float(value), digits)  # NaN (unknown) → null

    for i, text in enumerate(prompts):
        per_model = {
            m: {"quality": number(pred.quality[i, j], 4), "output_tokens": number(pred.output_tokens[i, j], 1),
                "cost": number(pred.cost[i, j], 8)}
            for j, m in enumerate(pred.models)
        }
        click.echo(json.dumps({"prompt": text[:80], "route_to": choice[i], "estimator": estimator,
                               "models": per_model}))


if __name__ == "__main__":
    main()
