"""routeforge's staleness judgment (`pipelines/stale.py`) against the stale status Dagster's UI shows,
verdict by verdict, over random sequences of materializations, code changes and data changes on a
graph shaped like the pipeline's (`benchmarks/stale_graph.py`).

Dagster's side is asked as the UI asks it: a real dagster-webserver on loopback serves the graph as a
code location over the same instance, and GraphQL's `staleStatus` / `staleCauses` of each asset
partition are its verdicts; a code change reloads the location (`reloadRepositoryLocation`), as a
deploy does. Public APIs on both sides, so no Dagster internals anywhere in routeforge.

Why a benchmark and not a test: it says whether a Dagster upgrade moved the rules `pipelines/stale.py`
follows, in minutes. Run it after changing Dagster's version; every verdict should agree.

    .venv/bin/python -m benchmarks.stale_equivalence [--quick]
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg
from routeforge.generation.local_server import free_port, wait_healthy
from routeforge.pipelines.stale import Versions, stale_causes

from benchmarks.common import REPO, parser, results_dir
from benchmarks.stale_graph import INITIAL, LETTERS, graph
from tools.graphql import graphql_caller

LOCATION = "benchmarks.stale_graph"  # a module code location is named after its module
NODES = "{ assetNodes { assetKey { path } opVersion } }"
VERDICT = ('p%d: assetNodeOrError(assetKey: {path: ["%s"]}) { ... on AssetNode { staleStatus%s '
           'staleCauses%s { key { path } partitionKey reason } } }')
DEPENDENCY = "has a new dependency data version ("


@contextlib.contextmanager
def webserver(home: Path, state_file: Path):
    """dagster-webserver on loopback over `stale_graph` and the instance at `home`; yields a GraphQL caller.
    Stopped by its PID on the way out."""
    port, log = free_port(), home / "webserver.log"
    env = {**os.environ, "DAGSTER_HOME": str(home), "ROUTEFORGE_STALE_GRAPH": str(state_file)}
    command = [str(Path(sys.executable).with_name("dagster-webserver")), "-h", "127.0.0.1", "-p", str(port),
               "-m", LOCATION]
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(process, f"{url}/server_info", log, timeout_s=180)
        yield graphql_caller(url, timeout_s=120)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def reload(graphql, code: dict[str, str]) -> None:
    """Reload the code location and wait (bounded) until it serves the code versions just written."""
    graphql(f'mutation {{ reloadRepositoryLocation(repositoryLocationName: "{LOCATION}") {{ __typename }} }}')
    for _ in range(120):
        nodes = graphql(NODES)["assetNodes"]
        if {n["assetKey"]["path"][0]: n["opVersion"] for n in nodes if n["opVersion"]} == code:
            return
        time.sleep(0.5)
    raise RuntimeError(f"the code location did not reload to code versions {code} within 60 s")


def theirs(graphql, keys) -> list:
    """The UI's verdict on each (asset, partition) of `keys`, in one GraphQL request: its status and its
    root causes as (asset, reason), the UI following a dependency's change up to where it began."""
    fields = []
    for i, (key, partition) in enumerate(keys):
        arg = f'(partition: "{partition}")' if partition else ""
        fields.append(VERDICT % (i, key, arg, arg))
    answer = graphql("{ " + " ".join(fields) + " }")
    return [(answer[f"p{i}"]["staleStatus"].lower(),
             sorted({("/".join(c["key"]["path"]), c["reason"]) for c in answer[f"p{i}"]["staleCauses"]}))
            for i in range(len(keys))]


def agree(versions: Versions, key: str, mine, verdict) -> bool:
    """One verdict compared: the same status (missing, fresh, stale); the same causes on the asset itself
    (a new code version, a dependency added or removed); and every root cause the UI names upstream is
    explained by a dependency whose data version changed in routeforge's judgment, and the reverse."""
    status, root_causes = verdict
    if mine == "missing" or status == "missing":
        return mine == status
    if ("stale" if mine else "fresh") != status:
        return False
    own = sorted(c for c in mine if not c.startswith(DEPENDENCY))
    changed = {c.removeprefix(DEPENDENCY).rstrip(")") for c in mine if c.startswith(DEPENDENCY)}
    upstream = {asset for asset, _ in root_causes if asset != key}
    if own != sorted(reason for asset, reason in root_causes if asset == key) or bool(changed) != bool(upstream):
        return False
    reach = {name: {name, *ancestors(versions, name)} for name in changed}
    return all(any(asset in names for names in reach.values()) for asset in upstream)


def ancestors(versions: Versions, name: str) -> set[str]:
    found, todo = set(), [dg.AssetKey(name)]
    while todo:
        for parent in versions.parents(todo.pop()):
            if parent.to_user_string() not in found:
                found.add(parent.to_user_string())
                todo.append(parent)
    return found


def ours(versions: Versions, key: str, partition: str | None):
    if versions.record(dg.AssetKey(key), partition) is None:
        return "missing"
    return sorted(set(stale_causes(versions, dg.AssetKey(key), partition)))


def main() -> int:
    args = parser(__doc__).parse_args()
    sequences, steps = (3, 15) if args.quick else (8, 30)
    keys = [("a", None), *(("b", p) for p in LETTERS.get_partition_keys()), ("c", None), ("d", None)]
    checks, differ, start = 0, [], time.perf_counter()
    for seq in range(sequences):
        rng = random.Random(seq)
        values, code = dict(INITIAL["values"]), dict(INITIAL["code"])
        with tempfile.TemporaryDirectory(prefix="routeforge-stale-") as folder:
            home, state_file = Path(folder) / "dagster_home", Path(folder) / "graph.json"
            home.mkdir()
            state_file.write_text(json.dumps({"values": values, "code": code}))
            with webserver(home, state_file) as graphql, dg.DagsterInstance.from_config(str(home)) as instance:
                reload(graphql, code)
                for step in range(steps):
                    move = rng.choice(["a", "b", "c", "d", "value", "code"])
                    assets = graph(values, code)
                    if move == "value":
                        values[rng.choice("ab")] = rng.choice("123")
                    elif move == "code":
                        code[rng.choice("abc")] = rng.choice("12")
                        state_file.write_text(json.dumps({"values": values, "code": code}))
                        reload(graphql, code)
                    else:
                        partition = rng.choice(LETTERS.get_partition_keys()) if move == "b" else None
                        dg.materialize(assets, instance=instance, selection=move, partition_key=partition,
                                       raise_on_error=False)
                    # one view of the records per step: every verdict of the step reads the same history
                    versions = Versions(dg.Definitions(assets=graph(values, code)), instance)
                    dagster = theirs(graphql, keys)
                    for (key, partition), verdict in zip(keys, dagster):
                        checks += 1
                        mine = ours(versions, key, partition)
                        if not agree(versions, key, mine, verdict):
                            differ.append({"sequence": seq, "step": step, "asset": key, "partition": partition,
                                           "ours": mine, "dagster": verdict})
        print(f"sequence {seq + 1}/{sequences}: {checks} verdicts so far, {len(differ)} differ", flush=True)
    result = {"dagster": dg.__version__, "sequences": sequences, "steps": steps, "verdicts": checks,
              "differ": len(differ), "differences": differ[:20], "seconds": round(time.perf_counter() - start, 1),
              "dagster_side": "GraphQL staleStatus / staleCauses of a dagster-webserver",
              "quick": args.quick}
    out = results_dir("stale_equivalence") / ("quick.json" if args.quick else "stale_equivalence.json")
    out.write_text(json.dumps(result, indent=2))
    print(f"{checks} verdicts, {len(differ)} differ (Dagster {dg.__version__}); {out}")
    return 0 if not differ else 1


if __name__ == "__main__":
    sys.exit(main())
