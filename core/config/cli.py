"""`routeforge config …`: check a fleet file and export its JSON Schema, without running anything.

Registered as a plugin of the runtime's `routeforge` command (entry point group
`routeforge.commands` in pyproject.toml): the runtime in `artifacts/` cannot import the pipeline's
configuration models, so the command that needs them lives here and is found at run time.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
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
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the resolved configuration as JSON.")
def validate(file: Path, as_json: bool) -> None:
    """Parse and validate FILE (paths resolved against its folder) and check that every input file it
    names exists; one line naming the bad field(s) and exit 1 when it is invalid."""
    fleet = load_checked(file)
    if as_json:
        click.echo(fleet.model_dump_json(indent=2))
        return
    profiled = sum(t.profile is not None for t in fleet.tiers)
    click.echo(f"OK: {file}: fleet {fleet.name}, {len(fleet.model_names)} models, {len(fleet.tiers)} tiers "
               f"({profiled} profiled), {len(fleet.datasets)} datasets, storage {fleet.storage_root}")
    for warning in fleet.warnings():
        click.echo(warning)


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
