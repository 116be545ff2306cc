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
