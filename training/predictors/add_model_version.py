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
from pathlib import Path
from typing import Any

import click
import numpy as np
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.artifacts.bundle.manifest import Fleet, ModelEntry
from routeforge.artifacts.bundle.signing import public_key_pem
from routeforge.artifacts.bundle.writer import ComponentSource, sha256_file
from routeforge.artifacts.cli.commands import TRACKING_OPTION, signature_options
from routeforge.artifacts.common import strict_json, temporary
from routeforge.artifacts.deciding.golden import refresh_golden
from routeforge.artifacts.deciding.router import text_key
from routeforge.artifacts.deciding.sentence_encoder import embed_for
from routeforge.registry.publish import publish_bundle
from routeforge.registry.release import CHECKS_TAG, RULES_TAG, ModelRegistry
from routeforge.training.predictors.add_model import add_model
from routeforge.training.predictors.label_audit import audit_labels


class LabelFileError(ValueError):
    """A label file that cannot be used; the message names the row and the field."""


# bounds on what one `add-model` reads: a label file larger than this is refused before it is read,
# as are more rows or a longer prompt (the encoder keeps 256 tokens; a 25 MB label text peaked at
# 3.8 GB while embedding)
MAX_LABEL_FILE_BYTES = 64 * 2**20
MAX_LABEL_ROWS = 50_000
MAX_TEXT_CHARS = 20_000
MAX_RESPONSE_CHARS = 100_000
MIN_LABELS = 20  # `--min-labels`: fewer say too little about a model to route to it
HOLDOUT_SHARE = 0.2  # of the labels not on evaluation prompts, held out of the fit for the gate


def _number(value: Any, where: str, field: str) -> float:
    if isinstance(value, bool) or (isinstance(value, str) and value.strip().lower() in ("true", "false")):
        raise LabelFileError(f"{where}: field '{field}' is a boolean, not a number: {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise LabelFileError(f"{where}: field '{field}' is not a number: {value!r}") from None


def read_labels(path: Path, max_rows: int = MAX_LABEL_ROWS, max_text_chars: int = MAX_TEXT_CHARS,
                max_bytes: int = MAX_LABEL_FILE_BYTES) -> list[dict[str, Any]]:
    """Rows of `text` and `score` (0…1), optionally `output_tokens`, `cost` and the model's `response`
    (which lets routeforge check the score, `label_audit`), from JSON-lines or CSV; a row that
    cannot be used is an error naming its line and field. Sizes are bounded (`max_bytes`,
    `max_rows`, `max_text_chars`) before anything large is held."""
    size = path.stat().st_size
    if size > max_bytes:
        raise LabelFileError(f"{path}: {size / 2**20:.1f} MiB; label files are limited to {max_bytes / 2**20:.0f} MiB")
    if path.suffix == ".csv":
        with open(path, newline="", encoding="utf-8", errors="surrogateescape") as handle:
            raw = list(csv.DictReader(handle))
        start = 2  # line 1 is the header
    else:
        raw, start = [], 1
        for i, line in enumerate(path.read_text(encoding="utf-8", errors="surrogateescape").splitlines(), start=1):
            if line.strip():
                try:
                    raw.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise LabelFileError(f"{path}:{i}: invalid JSON ({exc.msg})") from None
    if len(raw) > max_rows:
        raise LabelFileError(f"{path}: {len(raw)} rows; add-model reads at most {max_rows} (a larger label set "
                             "is a fleet's: add the model to the fleet file and retrain)")
    rows = []
    for i, row in enumerate(raw, start=start):
        where = f"{path}:{i}"
        if not isinstance(row, dict):
            raise LabelFileError(f"{where}: not an object")
        text = row.get("text")
        if not isinstance(text, str) or not text.strip():
            raise LabelFileError(f"{where}: field 'text' missing or empty")
        if len(text) > max_text_chars:
            raise LabelFileError(f"{where}: field 'text' is {len(text)} characters; at most {max_text_chars}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise LabelFileError(f"{where}: field 'text' is not valid Unicode (a lone surrogate at character "
                                 f"{exc.start})") from None
        out = {"text": text}
        response = row.get("response")
        if response not in (None, ""):
            if not isinstance(response, str):
                raise LabelFileError(f"{where}: field 'response' is not text: {type(response).__name__}")
            if len(response) > MAX_RESPONSE_CHARS:
                raise LabelFileError(f"{where}: field 'response' is {len(response)} characters; "
                                     f"at most {MAX_RESPONSE_CHARS}")
            out["response"] = response
        for field, required in (("score", True), ("output_tokens", False), ("cost", False)):
            value = row.get(field)
            if value in (None, ""):
                if required:
                    raise LabelFileError(f"{where}: field '{field}' missing")
                continue
            number = _number(value, where, field)
            if not math.isfinite(number) or number < 0 or (field == "score" and number > 1) \
                    or (field == "output_tokens" and number > 1e7):
                raise LabelFileError(f"{where}: field '{field}' out of range: {value!r}")
            out[field] = number
        rows.append(out)
    if len(rows) < 2:
        raise LabelFileError(f"{path}: {len(rows)} labelled prompt(s); at least 2 are needed")
    return rows


def split_holdout(rows: list[dict[str, Any]], evaluation_keys: set[bytes],
                  share: float = HOLDOUT_SHARE) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(fit, held out): every label on a prompt of the frozen evaluation set is held out (a label
    there must not steer the router on the very prompts it is judged on), and a share of the rest,
    chosen by the prompt's hash so the same file splits the same way."""
    fit, held = [], []
    for row in rows:
        key = text_key(row["text"])
        (held if key in evaluation_keys or key[0] < share * 256 else fit).append(row)
    return fit, held


def _evaluation_set(tracking_uri: str, name: str):
    """The registered model's frozen evaluation set (a pyarrow table; None before it has one)."""
    import pyarrow.parquet as pq

    registry = ModelRegistry(tracking_uri, name)
    if registry.pinned_evaluation_sha() is None:
        return None
    path, _ = registry.evaluation_set()
    return pq.read_table(path)


def add_model_version(*, name: str, model: str, labels: Path, tracking_uri: str, experiment: str,
                      signing_key: Path | None, source_alias: str = "champion", engine: str = "openai",
                      input_per_mtok: float | None = None, output_per_mtok: float | None = None,
                      public_key: Path | None = None, allow_unsigned: bool = False,
                      min_labels: int = MIN_LABELS) -> dict[str, Any]:
    """Register a version of `name` whose router also routes to `model` (see the module doc)."""
    from routeforge.core.config.base import plain_name  # lazy: pydantic, yaml on first use

    if signing_key is None:
        raise ValueError("--signing-key (or ROUTEFORGE_SIGNING_KEY) is required: every registered version is "
                         "signed, as the pipeline's are, or no router service will load it")
    try:
        plain_name(model)
    except ValueError as exc:
        raise ValueError(f"--model: {exc}") from None
    rows = read_labels(labels)  # a bad file fails before anything is downloaded
    if len(rows) < min_labels:
        raise LabelFileError(f"{labels}: {len(rows)} labelled prompts; --min-labels asks for at least {min_labels}")

    evaluation = _evaluation_set(tracking_uri, name)
    audit = audit_labels(rows, evaluation, model)
    refused = audit.refusal(model)
    if refused:
        raise LabelFileError(f"{labels}: {refused}")
    keys = set() if evaluation is None else {text_key(t) for t in evaluation.column("text").to_pylist()}
    fit_rows, held_rows = split_holdout(rows, keys)
    if len(fit_rows) < 2:
        raise LabelFileError(f"{labels}: {len(fit_rows)} labels left to fit after holding out the "
                             f"{len(held_rows)} on evaluation prompts or drawn for the gate; add labels")
    with temporary.scoped("add-model") as tmp:
        work = Path(tmp)
        bundle = load_bundle(f"models:/{name}@{source_alias}", work / "source", tracking_uri,
                             public_key=public_key, allow_unsigned=allow_unsigned)
        if model in bundle.models:
            raise ValueError(f"--model {model}: already in {name}@{source_alias} ({', '.join(bundle.models)})")
        router = bundle.router()
        probes = [r["text"] for r in rows[:64]]
        before = router.predict(probes).quality.copy()  # add_model changes `router` in place
        texts = [r["text"] for r in fit_rows]
        x = embed_for(router, texts)
        tokens = [r["output_tokens"] for r in rows if "output_tokens" in r]
        costs = [r["cost"] for r in rows if "cost" in r]
        record = add_model(router, model, x, np.array([r["score"] for r in fit_rows]),
                           output_tokens=float(np.mean(tokens)) if tokens else None,
                           cost=float(np.mean(costs)) if costs else None, texts=texts,
                           holdout=([r["text"] for r in held_rows], [r["score"] for r in held_rows]))
        record["holdout"]["verified"] = audit.scored  # the gate credits these, not the labels
        record["label_audit"] = audit.summary()
        components = []
        for c in bundle.manifest.components:
            folder = work / "components" / c.name
            shutil.copytree(bundle.root / c.name, folder)
            config = dict(c.config)
            if c.kind == "router":
                for f in folder.iterdir():
                    f.unlink()
                router.save(folder)
                # the manifest names what was added; the held-out labels themselves stay in the router
                config["added_models"] = [{**a, "holdout": {k: v for k, v in a["holdout"].items()
                                                            if k not in ("by_prompt", "verified")}}
                                          if "holdout" in a else a for a in router.meta["added_models"]]
            components.append(ComponentSource(c.name, c.kind, c.format, folder, dict(c.metrics), config))
        refresh_golden(components)  # the router changed: so did what it decides for the golden prompts
        fleet = bundle.manifest.fleet
        fleet = Fleet(fleet.name, [*fleet.models, ModelEntry(model, engine, input_per_mtok, output_per_mtok)],
                      fleet.tiers)
        registered, manifest = publish_bundle(
            name=name, fleet=fleet, components=components, staging_dir=work / "staging", tracking_uri=tracking_uri,
            experiment=experiment, artifact_location=None, alias="challenger",
            input_hashes={**bundle.manifest.lineage.input_hashes, f"labels:{model}": sha256_file(labels)},
            params={"added_model": model, "labels": str(len(rows)), "labels_fitted": str(len(fit_rows)),
                    "labels_held_out": str(len(held_rows)), "from_version": bundle.manifest.version,
                    "ridge": str(record["ridge"])},
            signing_key=signing_key, skip_unchanged=False,
            provenance=bundle.manifest.provenance)  # the source version's signed claims hold for this one too
        checks = _checks(registered, tracking_uri, work, public_key or public_key_pem(signing_key).encode(),
                         record, probes, before)
        _tag_like_a_pipeline_version(tracking_uri, name, registered.version, source_alias, checks)
    return {"uri": registered.uri, "registry_version": registered.version, "bundle_version": manifest.version,
            "from": f"{name}@{source_alias}", "added": record, "checks": checks}


def _checks(registered, tracking_uri: str, work: Path, public_key: Path | bytes, record: dict[str, Any],
            probes: list[str], before: np.ndarray) -> dict[str, bool]:
    """What the pipeline's asset checks assert of a version, for an added model's: the registered
    bundle verifies with the key and loads; the models it knew route exactly as before (their
    estimates unchanged on the labelled prompts); the gate has held-out labels to score the new model."""
    added = load_bundle(f"models:/{registered.name}/{registered.version}", work / "registered", tracking_uri,
                        public_key=public_key)
    after = added.router().predict(probes).quality[:, :before.shape[1]]
    return {"bundle_verifies": True, "known_models_route_as_before": bool(np.allclose(before, after, atol=1e-6)),
            "holdout_labels_for_the_gate": record["holdout"]["labels"] > 0}


def _tag_like_a_pipeline_version(tracking_uri: str, name: str, version: str, source_alias: str,
                                 checks: dict[str, bool]) -> None:
    """`checks_passed` and the release rules of the version it extends, as the pipeline's release
    step tags its versions: the gate then judges an added model's version by the same rules."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    source = client.get_model_version_by_alias(name, source_alias)
    client.set_model_version_tag(name, version, CHECKS_TAG, "true" if all(checks.values()) else "false")
    client.set_model_version_tag(name, version, "routeforge.checks", json.dumps(checks))
    if RULES_TAG in (source.tags or {}):
        client.set_model_version_tag(name, version, RULES_TAG, source.tags[RULES_TAG])


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
@click.option("--price-in", type=click.FloatRange(0, 1e4), default=None, help="USD per million input tokens")
@click.option("--price-out", type=click.FloatRange(0, 1e4), default=None, help="USD per million output tokens")
@click.option("--min-labels", type=click.IntRange(2, MAX_LABEL_ROWS), default=MIN_LABELS, show_default=True,
              help="refuse a label file with fewer labelled prompts")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
@signature_options
@TRACKING_OPTION
def add_model_command(name: str, model: str, labels: Path, experiment: str, signing_key: Path | None,
                      source_alias: str, engine: str, price_in: float | None, price_out: float | None,
                      min_labels: int, as_json: bool, tracking_uri: str | None, public_key: Path | None = None,
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
                                public_key=public_key, allow_unsigned=allow_unsigned, min_labels=min_labels)
    except (LabelFileError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(strict_json.dumps(out, indent=2))
        return
    added = out["added"]
    click.echo(f"registered {out['uri'].replace('@challenger', '')} version {out['registry_version']} "
               f"(bundle {out['bundle_version']}) as challenger: {out['from']} + {model} from {added['labels']} "
               f"labels (ridge {added['ridge']:g}; {added['holdout']['labels']} held out for the gate); checks "
               f"{'passed' if all(out['checks'].values()) else 'FAILED: ' + str(out['checks'])}; "
               f"gate it with `routeforge bundle gate {name}`")
