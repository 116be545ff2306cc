"""`make ui`: the Dagster UI (webserver and daemon, `dagster dev`) over this checkout's code location,
started so that it opens where a person sees the pipeline and says nothing it need not.

- The global lineage opens with the five stage groups collapsed into boxes whose links are hard to
  follow; the UI keeps which groups are open in the page's `?expanded=` query, so the link printed
  at start (`lineage_url`) opens every stage with its assets and their links.
- Run from the checkout, whose `dagster.yaml` is the instance's template, `dagster dev` warned on every
  start that it found a `dagster.yaml` in the current folder that "will not be used"; it runs in the
  instance folder ($DAGSTER_HOME) instead, with the fleet file and the workspace by absolute path.
- `dagster dev` is superseded by the `dg` command line (not a dependency here); its notice of that on
  every start is filtered, not its other warnings.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[1]
WORKSPACE = REPO / "workspace.yaml"
LOCATION = "routeforge"  # the code location's name in workspace.yaml
# the asset groups, one per stage of the pipeline, in the order data flows (a test holds this to the
# definitions' groups)
STAGE_GROUPS = ("labels", "latency", "training", "evaluation", "registry")
SUPERSEDED_NOTICE = "ignore:Function `dev_command` is superseded"


def lineage_url(base: str, groups: tuple[str, ...] = STAGE_GROUPS) -> str:
    """The UI's global lineage with every group in `groups` open. A group's id is
    `global@global:<group>`, or `<repository>@<location>:<group>` where the UI's per-code-location
    grouping is switched on; both are given, so the link opens the groups either way."""
    ids = [f"{prefix}:{group}" for group in groups for prefix in ("global@global", f"__repository__@{LOCATION}")]
    return f"{base.rstrip('/')}/asset-groups?expanded={quote(','.join(ids), safe=',:@')}"


def main(argv: list[str] | None = None) -> None:
    from routeforge.pipelines.definitions import DEFAULT_CONFIG  # lazy: dagster, numpy on first use
    from routeforge.pipelines.instance import instance_home  # lazy: dagster, pydantic on first use

    parser = argparse.ArgumentParser(description="The Dagster UI over the fleet in $ROUTEFORGE_CONFIG.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3000)
    args = parser.parse_args(argv)
    config = Path(os.environ.get("ROUTEFORGE_CONFIG") or DEFAULT_CONFIG).resolve()
    home = instance_home().resolve()
    warnings = ",".join(w for w in (os.environ.get("PYTHONWARNINGS"), SUPERSEDED_NOTICE) if w)
    env = {**os.environ, "ROUTEFORGE_CONFIG": str(config), "DAGSTER_HOME": str(home), "PYTHONWARNINGS": warnings}
    target = ["-w", str(WORKSPACE)] if WORKSPACE.is_file() else ["-m", "routeforge.pipelines.definitions"]
    print(f"routeforge: the pipeline's lineage, every stage open: {lineage_url(f'http://{args.host}:{args.port}')}",
          flush=True)
    os.chdir(home)
    os.execve(sys.executable, [sys.executable, "-m", "dagster", "dev", *target, "-h", args.host, "-p", str(args.port)],
              env)


if __name__ == "__main__":
    main()
