"""The Dagster webserver offered to viewers (deploy/compose.yaml's `dagster-viewer`, Helm's
`enableReadOnly`) runs with `--read-only`: started for real on loopback over this project's code
location, it grants no permission, and a run launched through its GraphQL API is refused and never
reaches the instance; the operators' webserver, started the same way without the flag, may launch."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from routeforge.generation.local_server import free_port, wait_healthy

from tests.conftest import REPO
from tests.services import child
from tools.graphql import graphql_caller

LAUNCH = ('mutation { launchRun(executionParams: {selector: {repositoryLocationName: '
          '"routeforge.pipelines.definitions", repositoryName: "__repository__", jobName: "build_prompts"}, '
          'runConfigData: "{}"}) { __typename } }')


@contextlib.contextmanager
def webserver(folder: Path, *flags: str, dagster_home: Path | None = None, workspace: bool = False,
              state: Path | None = None):
    """A real dagster-webserver on loopback over the code location (by module, or through
    workspace.yaml as `make ui` loads it, location `routeforge`) and the state folder `state` (the
    fleet's paths, hence its code versions, follow it); yields a GraphQL caller."""
    port = free_port()
    home = dagster_home or folder / "dagster_home"
    env = {**os.environ, "DAGSTER_HOME": str(home), "ROUTEFORGE_CONFIG": str(REPO / "configs" / "demo.yaml"),
           "ROUTEFORGE_STATE": str(state or folder / "state")}
    home.mkdir(parents=True, exist_ok=True)
    log = folder / f"webserver{'-'.join(flags)}.log"
    target = ["-w", str(REPO / "workspace.yaml")] if workspace else ["-m", "routeforge.pipelines.definitions"]
    command = [str(Path(sys.executable).with_name("dagster-webserver")), *flags, "-h", "127.0.0.1", "-p", str(port),
               *target]
    with child(command, log, env=env, cwd=REPO if workspace else folder) as process:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(process, f"{url}/server_info", log, timeout_s=180)
        yield graphql_caller(url)


def test_the_viewers_webserver_is_read_only(tmp_path):
    with webserver(tmp_path, "--read-only") as graphql:
        permissions = {p["permission"]: p["value"] for p in graphql("{ permissions { permission value } }")["permissions"]}
        assert permissions["launch_pipeline_execution"] is False and not any(permissions.values())
        assert graphql(LAUNCH)["launchRun"]["__typename"] == "UnauthorizedError"
        runs = graphql("{ runsOrError { ... on Runs { results { runId } } } }")["runsOrError"]["results"]
        assert runs == []
    with webserver(tmp_path) as graphql:  # the operators' one, same instance: it may
        permissions = {p["permission"]: p["value"] for p in graphql("{ permissions { permission value } }")["permissions"]}
        assert permissions["launch_pipeline_execution"] is True and permissions["wipe_assets"] is True


def test_make_ui_starts_without_a_warning_and_prints_the_open_lineage(tmp_path):
    """Issue 73, item 5: `make ui` (`python -m routeforge.pipelines.ui`) warned on every start that the
    checkout's dagster.yaml "will not be used", and that `dagster dev` is superseded; it now starts
    in the instance folder with neither, and first prints the lineage link with every stage open."""
    from routeforge.pipelines.ui import STAGE_GROUPS, lineage_url

    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "ROUTEFORGE_STATE": str(tmp_path / "state"),
           "ROUTEFORGE_CONFIG": "configs/demo.yaml"}  # relative to the checkout, as a user sets it
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
    log = tmp_path / "ui.log"
    with child([sys.executable, "-m", "routeforge.pipelines.ui", "--port", str(port)], log, env=env,
               cwd=REPO) as process:
        wait_healthy(process, f"http://127.0.0.1:{port}/server_info", log, timeout_s=180)
        graphql = graphql_caller(f"http://127.0.0.1:{port}")
        groups = {n["groupName"] for n in graphql("{ assetNodes { groupName } }")["assetNodes"]}
        printed = log.read_text()  # what it said starting and serving (stopping it, the code server's exit is logged)
    assert groups == set(STAGE_GROUPS)  # the link opens every group the definitions have
    assert printed.startswith(f"routeforge: the pipeline's lineage, every stage open: "
                              f"{lineage_url(f'http://127.0.0.1:{port}')}")
    assert "Serving dagster-webserver" in printed
    noted = [line for line in printed.splitlines() if "warning" in line.lower() or "Found a dagster" in line]
    assert not noted, noted
