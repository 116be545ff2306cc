"""routeforge's staleness judgment (`pipelines/stale.py`, Dagster's public API) against Dagster's own
stale-status resolver (internal), verdict by verdict, over random sequences of materializations, code
changes and data changes on a graph shaped like the pipeline's (an unpartitioned source, a partitioned
stage reading it, an unpartitioned stage reading every partition).

Why a benchmark and not a test: it is the one place that imports Dagster's internals (`dagster._core`),
on purpose, to say whether a Dagster upgrade moved the rules `pipelines/stale.py` follows. Run it after
changing Dagster's version; every verdict should agree.

    .venv/bin/python -m benchmarks.stale_equivalence [--quick]
"""

from __future__ import annotations

import json
import random
import sys
import time

import dagster as dg
from dagster._core.asset_graph_view.asset_graph_view import AssetGraphView
from dagster._core.definitions.data_version import CachingStaleStatusResolver, StaleStatus
from dagster._core.definitions.temporal_context import TemporalContext
from dagster._time import get_current_datetime
from routeforge.pipelines.stale import Versions, stale_causes

from benchmarks.common import parser, results_dir

LETTERS = dg.StaticPartitionsDefinition(["x", "y", "z"])


def graph(values: dict[str, str], code: dict[str, str]):
    @dg.asset(code_version=code["a"])
    def a():
        return dg.Output(values["a"], data_version=dg.DataVersion(values["a"]))

    @dg.asset(code_version=code["b"], partitions_def=LETTERS)
    def b(context, a):
        value = f"{a}{context.partition_key}{values['b']}"
        return dg.Output(value, data_version=dg.DataVersion(value))

    @dg.asset(code_version=code["c"])
    def c(b):
        return len(b)

    @dg.asset  # no code version: Dagster's default data version, a new one per materialization
    def d(c):
        return c

    return [a, b, c, d]


def theirs(instance, assets, key: str, partition: str | None):
    defs = dg.Definitions(assets=assets)
    asset_graph = defs.resolve_asset_graph()
    view = AssetGraphView(temporal_context=TemporalContext(effective_dt=get_current_datetime(), last_event_id=None),
                          instance=instance, asset_graph=asset_graph)
    resolver = CachingStaleStatusResolver(instance=instance, asset_graph=asset_graph, loading_context=view)
    status = resolver.get_status(dg.AssetKey(key), partition)
    if status == StaleStatus.MISSING:
        return "missing"
    return sorted({c.reason + (f" ({c.dependency.asset_key.to_user_string()})" if c.dependency and "dependency data"
                                in c.reason else "") for c in resolver.get_stale_causes(dg.AssetKey(key), partition)})


def ours(instance, assets, key: str, partition: str | None):
    versions = Versions(dg.Definitions(assets=assets), instance)
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
        values, code = {"a": "1", "b": "1"}, {"a": "1", "b": "1", "c": "1"}
        with dg.instance_for_test() as instance:
            for step in range(steps):
                move = rng.choice(["a", "b", "c", "d", "value", "code"])
                assets = graph(values, code)
                if move == "value":
                    values[rng.choice("ab")] = rng.choice("123")
                elif move == "code":
                    code[rng.choice("abc")] = rng.choice("12")
                else:
                    partition = rng.choice(LETTERS.get_partition_keys()) if move == "b" else None
                    dg.materialize(assets, instance=instance, selection=move, partition_key=partition,
                                   raise_on_error=False)
                assets = graph(values, code)
                for key, partition in keys:
                    checks += 1
                    mine, dagster = ours(instance, assets, key, partition), theirs(instance, assets, key, partition)
                    if mine != dagster:
                        differ.append({"sequence": seq, "step": step, "asset": key, "partition": partition,
                                       "ours": mine, "dagster": dagster})
    result = {"dagster": dg.__version__, "sequences": sequences, "steps": steps, "verdicts": checks,
              "differ": len(differ), "differences": differ[:20], "seconds": round(time.perf_counter() - start, 1),
              "quick": args.quick}
    out = results_dir("stale_equivalence") / ("quick.json" if args.quick else "stale_equivalence.json")
    out.write_text(json.dumps(result, indent=2))
    print(f"{checks} verdicts, {len(differ)} differ (Dagster {dg.__version__}); {out}")
    return 0 if not differ else 1


if __name__ == "__main__":
    sys.exit(main())
