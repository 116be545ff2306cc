"""`routeforge config …`: check a fleet file and export its JSON Schema, without running anything.

Registered as a plugin of the runtime's `routeforge` command (entry point group
`routeforge.commands` in pyproject.toml): the runtime in `artifacts/` cannot import the pipeline's
configuration models, so the command that needs them lives here, above every kind it names
(`routeforge.fleet`), and is found at run time.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import routeforge.fleet  # noqa: F401  (every kind loaded before a fleet file is read)
from routeforge.core.config.base import ConfigError
from routeforge.core.config.field_docs import describe
from routeforge.core.config.files import load_checked
from routeforge.core.config.fleet import FleetConfig

SCHEMA_ID = "https://routeforge.dev/schemas/fleet.schema.json"


def fleet_json_schema() -> dict:
    """JSON Schema (draft 2020-12) of the fleet file, from the pydantic models, for editors."""
    schema = describe(FleetConfig.model_json_schema(mode="validation"), FleetConfig)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
            "description": "routeforge fleet file: models, tiers, datasets and the settings of every stage "
                           "(see configs/fleet.example.yaml).", **schema}


@click.group()
def config() -> None:
    """Fleet files: validate one, or print the JSON Schema editors use."""


@config.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the resolved configuration as JSON (one FILE).")
def validate(files: tuple[Path, ...], as_json: bool) -> None:
    """Parse and validate each FILE (paths resolved against its folder) and check the input files it
    names: that they exist, hold rows, and have the columns, tasks and models the file maps. One
    line per file (OK, or the bad fields); exit 1 when any is invalid."""
    if as_json and len(files) != 1:
        raise click.UsageError("--json prints one configuration: give one FILE")
    failed = 0
    for file in files:
        try:
            fleet = load_checked(file)
        except ConfigError as exc:
            if len(files) == 1:
                raise
            click.echo(f"error: {exc}", err=True)
            failed += 1
            continue
        if as_json:
            click.echo(fleet.model_dump_json(indent=2))
            return
        profiled = sum(t.profile is not None for t in fleet.tiers)
        click.echo(f"OK: {file}: fleet {fleet.name}, {len(fleet.model_names)} models, {len(fleet.tiers)} tiers "
                   f"({profiled} profiled), {len(fleet.datasets)} datasets, storage {fleet.storage_root}")
        for warning in fleet.warnings():
            click.echo(warning)
    if failed:
        raise SystemExit(1)


@config.command()
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the schema to this file instead of standard output.")
def schema(output: Path | None) -> None:
    """The fleet file's JSON Schema (configs/fleet.schema.json is this output, kept in sync by a test)."""
    text = json.dumps(fleet_json_schema(), indent=2, sort_keys=True) + "\n"
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text)
        click.echo(f"wrote {output}")

