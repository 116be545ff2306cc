"""`routeforge bundle add-model NAME --model M --labels FILE`: a new model enters a registered router
from its own labels alone, as a new registry version (no pipeline run, no retrain).

The version at `--from` (champion by default) is verified and downloaded; the labelled prompts are
embedded with the bundle's own ONNX encoder; `training.predictors.add_model` extends its router; the
bundle is rewritten with the router replaced and the model added to the fleet, signed, and
registered as `challenger`: `routeforge bundle gate NAME` then decides, by the rules recorded at
registration, whether it becomes the champion. The other components (KNN estimator, text
predictors, routing policies) keep the models they were trained on until the next retrain.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any

import click
import numpy as np
from routeforge.artifacts.cli import TRACKING_OPTION, signature_options


class LabelFileError(ValueError):
    """A label file that cannot be used; the message names the row and the field."""


def read_labels(path: Path) -> list[dict[str, Any]]:
    """Rows of `text` and `score` (0…1), optionally `output_tokens` and `cost`, from JSON-lines or
    CSV; a row that cannot be used is an error naming its line and field."""
    if path.suffix == ".csv":
        with open(path, newline="", encoding="utf-8") as handle:
            raw = list(csv.DictReader(handle))
        start = 2  # line 1 is the header
    else:
        raw, start = [], 1
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if line.strip():
                try:
                    raw.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise LabelFileError(f"{path}:{i}: invalid JSON ({exc.msg})") from None
    rows = []
    for i, row in enumerate(raw, start=start):
        if not isinstance(row, dict):
            raise LabelFileError(f"{path}:{i}: not an object")
        text = row.get("text")
        if not isinstance(text, str) or not text.strip():
            raise LabelFileError(f"{path}:{i}: field 'text' missing or empty")
        out = {"text": text}
        for field, required in (("score", True), ("output_tokens", False), ("cost", False)):
            value = row.get(field)
            if value in (None, ""):
                if required:
                    raise LabelFileError(f"{path}:{i}: field '{field}' missing")
                continue
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise LabelFileError(f"{path}:{i}: field '{field}' is not a number: {value!r}") from None
            if not math.isfinite(number) or number < 0 or (field == "score" and number > 1):
                raise LabelFileError(f"{path}:{i}: field '{field}' out of range: {value!r}")
            out[field] = number
        rows.append(out)
    if len(rows) < 2:
        raise LabelFileError(f"{path}: {len(rows)} labelled prompt(s); at least 2 are needed")
    return rows


def add_model_version(*, name: str, model: str, labels: Path, tracking_uri: str, experiment: str,
                      signing_key: Path | None, source_alias: str = "champion", engine: str = "openai",
                      input_per_mtok: float | None = None, output_per_mtok: float | None = None,
                      public_key: Path | None = None, allow_unsigned: bool = False) -> dict[str, Any]:
    """Register a version of `name` whose router also routes to `model` (see the module doc)."""
    from routeforge.artifacts.loader import load_bundle
    from routeforge.artifacts.manifest import Fleet, ModelEntry
    from routeforge.artifacts.sentence_encoder import embed_for
    from routeforge.artifacts.writer import ComponentSource, sha256_file
    from routeforge.registry.publish import publish_bundle
    from routeforge.training.predictors.add_model import add_model

    rows = read_labels(labels)  # a bad file fails before anything is downloaded
    with tempfile.TemporaryDirectory(prefix="routeforge-add-model-") as tmp:
        work = Path(tmp)
        bundle = load_bundle(f"models:/{name}@{source_alias}", work / "source", tracking_uri,
                             public_key=public_key, allow_unsigned=allow_unsigned)
        if model in bundle.models:
            raise ValueError(f"--model {model}: already in {name}@{source_alias} ({', '.join(bundle.models)})")
        router = bundle.router()
        texts = [r["text"] for r in rows]
        x = embed_for(router, texts)
        tokens = [r["output_tokens"] for r in rows if "output_tokens" in r]
        costs = [r["cost"] for r in rows if "cost" in r]
        record = add_model(router, model, x, np.array([r["score"] for r in rows]),
                           output_tokens=float(np.mean(tokens)) if tokens else None,
                           cost=float(np.mean(costs)) if costs else None, texts=texts)
        components = []
        for c in bundle.manifest.components:
            folder = work / "components" / c.name
            shutil.copytree(bundle.root / c.name, folder)
            config = dict(c.config)
            if c.kind == "router":
                for f in folder.iterdir():
                    f.unlink()
                router.save(folder)
                config["added_models"] = router.meta["added_models"]
            components.append(ComponentSource(c.name, c.kind, c.format, folder, dict(c.metrics), config))
        fleet = bundle.manifest.fleet
        fleet = Fleet(fleet.name, [*fleet.models, ModelEntry(model, engine, input_per_mtok, output_per_mtok)],
                      fleet.tiers)
        registered, manifest = publish_bundle(
            name=name, fleet=fleet, components=components, staging_dir=work / "staging", tracking_uri=tracking_uri,
            experiment=experiment, artifact_location=None, alias="challenger",
            input_hashes={**bundle.manifest.lineage.input_hashes, f"labels:{model}": sha256_file(labels)},
            params={"added_model": model, "labels": str(len(rows)), "from_version": bundle.manifest.version,
                    "ridge": str(record["ridge"])},
            signing_key=signing_key, skip_unchanged=False)
    return {"uri": registered.uri, "registry_version": registered.version, "bundle_version": manifest.version,
            "from": f"{name}@{source_alias}", "added": record}


@click.command("add-model")
@click.argument("name")
@click.option("--model", required=True, help="the new model's name (as the fleet will call it)")
@click.option("--labels", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="JSON-lines or CSV: text, score (0…1), optional output_tokens and cost, one prompt a row")
@click.option("--experiment", required=True, help="the fleet's MLflow experiment (registry.experiment)")
@click.option("--signing-key", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              envvar="ROUTEFORGE_SIGNING_KEY", default=None,
              help="Ed25519 private key (PEM) the new version is signed with [env ROUTEFORGE_SIGNING_KEY]")
@click.option("--from", "source_alias", default="champion", show_default=True,
              help="the alias of the version to extend")
@click.option("--engine", default="openai", show_default=True, help="how the fleet serves the model")
@click.option("--price-in", type=float, default=None, help="USD per million input tokens")
@click.option("--price-out", type=float, default=None, help="USD per million output tokens")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
@signature_options
@TRACKING_OPTION
def add_model_command(name: str, model: str, labels: Path, experiment: str, signing_key: Path | None,
                      source_alias: str, engine: str, price_in: float | None, price_out: float | None,
                      as_json: bool, tracking_uri: str | None, public_key: Path | None = None,
                      allow_unsigned: bool = False) -> None:
    """Route to a new model from its own labels: register a version of NAME whose router knows
    MODEL (no retrain); `routeforge bundle gate NAME` then decides whether it becomes champion."""
    if not tracking_uri:
        raise click.UsageError("no tracking URI: pass --tracking-uri or set MLFLOW_TRACKING_URI")
    import logging

    logging.getLogger("mlflow").setLevel(logging.ERROR)  # its advice on logging models is not for this user
    try:
        out = add_model_version(name=name, model=model, labels=labels, tracking_uri=tracking_uri,
                                experiment=experiment, signing_key=signing_key, source_alias=source_alias,
                                engine=engine, input_per_mtok=price_in, output_per_mtok=price_out,
                                public_key=public_key, allow_unsigned=allow_unsigned)
    except (LabelFileError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        from routeforge.artifacts import strict_json

        click.echo(strict_json.dumps(out, indent=2))
        return
    added = out["added"]
    click.echo(f"registered {out['uri'].replace('@challenger', '')} version {out['registry_version']} "
               f"(bundle {out['bundle_version']}) as challenger: {out['from']} + {model} from {added['labels']} "
               f"labels (ridge {added['ridge']:g}); gate it with `routeforge bundle gate {name}`")
