"""`routeforge doctor FLEET`: find what a dead run left held and release it (`pipelines.recovery`).

A run killed with SIGKILL, by the OOM killer or with its machine can leave a concurrency slot
claimed (every later run of the pool waits forever), its Dagster run STARTED, MLflow runs RUNNING and
a registered version without its alias. `pipelines.run` releases these at its start; this command
does it on demand (for runs the UI or the sensors launch) and says what it found, one line each.
"""

from __future__ import annotations

import click


@click.command()
@click.argument("fleet_file", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print what was released as JSON.")
def doctor(fleet_file: str, as_json: bool) -> None:
    """Release what dead runs of FLEET_FILE's fleet hold: pool slots, Dagster runs, MLflow runs, aliases."""
    import json

    import routeforge.fleet  # noqa: F401  # lazy: numpy, rich on first use
    from routeforge.core.config.files import load_checked  # lazy: numpy, pydantic on first use
    from routeforge.pipelines.instance import shared_instance  # lazy: dagster, pydantic on first use
    from routeforge.pipelines.recovery import recover  # lazy: dagster, pydantic on first use

    config = load_checked(fleet_file)
    lines: list[str] = []
    found = recover(shared_instance(), config, log=lines.append)
    if as_json:
        click.echo(json.dumps({"failed_runs": found.failed_runs, "freed_slots": found.freed_slots,
                               "killed_mlflow_runs": found.killed_mlflow_runs, "aliases_set": found.aliases_set}))
        return
    for line in lines:
        click.echo(line)
    click.echo(f"{len(lines)} thing(s) released" if lines else "nothing held by a dead run")
