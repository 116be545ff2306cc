"""The Dagster instance every entry point shares: `$DAGSTER_HOME`, else `<state folder>/dagster`.

`make ui`, `make demo` and `python -m routeforge.pipelines.run` then record runs in one place, so the
UI shows what the driver ran and a re-run skips what did not change. The instance's settings are the
checkout's `dagster.yaml` (telemetry off, run queue, pools, run monitoring), copied into the instance
folder; it names no paths, so Dagster keeps its storage, compute logs and artifacts under that
folder. Installed without a checkout, the folder gets the one setting that must hold everywhere:
telemetry off.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import dagster as dg
from routeforge.artifacts.common.state_folder import state_root

SETTINGS = Path(__file__).resolve().parents[1] / "dagster.yaml"  # the checkout's, where there is one
MINIMAL_SETTINGS = "telemetry:\n  enabled: false\n"


def instance_home() -> Path:
    """The instance folder, with its dagster.yaml: $DAGSTER_HOME, else `<state>/dagster` (created,
    and given the checkout's settings where it has none)."""
    if os.environ.get("DAGSTER_HOME"):
        return Path(os.environ["DAGSTER_HOME"])
    home = state_root() / "dagster"
    home.mkdir(parents=True, exist_ok=True)
    target = home / "dagster.yaml"
    if SETTINGS.is_file() and (not target.is_file() or SETTINGS.stat().st_mtime > target.stat().st_mtime):
        shutil.copyfile(SETTINGS, target)  # as `make` does: the checkout's settings, when newer
    elif not target.is_file():
        target.write_text(MINIMAL_SETTINGS)
    return home


def instance_note() -> str | None:
    """A line for the start of a run whose instance is not the one `make ui` opens (`<state>/dagster`):
    $DAGSTER_HOME set elsewhere sends the runs where the UI does not look."""
    home = os.environ.get("DAGSTER_HOME")
    ui = state_root() / "dagster"
    if not home or Path(home).resolve() == ui.resolve():
        return None
    return (f"routeforge: runs are recorded in the Dagster instance at $DAGSTER_HOME ({home}), not {ui}, which "
            f"`make ui` opens: unset DAGSTER_HOME, or run `make ui DAGSTER_HOME={home}`")


def shared_instance() -> dg.DagsterInstance:
    """The instance at `instance_home()`: persistent, so the versions on record let a re-run skip
    what did not change (and `stale.lost` rebuilds what they claim but storage lost). Opened, and
    its databases first used, under a file lock beside it: the first use creates the SQLite tables,
    and two runs started at once on a new state folder raced on that ("table secondary_indexes
    already exists", or alembic's "more than one head"; one run died) before the lock."""
    from filelock import FileLock

    home = instance_home()
    with FileLock(str(home / ".open.lock"), timeout=600):
        instance = dg.DagsterInstance.from_config(str(home))
        # Dagster creates each SQLite database on its first use, not on opening: use them all here
        instance.get_runs(limit=1)
        instance.get_asset_records()
        instance.all_instigator_state()
        return instance
