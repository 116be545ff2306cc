"""The code location `benchmarks/stale_equivalence.py` serves to a real dagster-webserver: a graph shaped
like the pipeline's (an unpartitioned source, a partitioned stage reading it, an unpartitioned stage
reading every partition, one asset without a code version), whose code versions and values are read
from the JSON file `$ROUTEFORGE_STALE_GRAPH` each time the location loads (the benchmark reloads it
after each code change, as a deploy would)."""

from __future__ import annotations

import json
import os

import dagster as dg

LETTERS = dg.StaticPartitionsDefinition(["x", "y", "z"])
INITIAL = {"values": {"a": "1", "b": "1"}, "code": {"a": "1", "b": "1", "c": "1"}}  # where a sequence starts


def graph(values: dict[str, str], code: dict[str, str]) -> list:
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


def _from_file() -> dg.Definitions:
    path = os.environ.get("ROUTEFORGE_STALE_GRAPH")
    state = json.loads(open(path).read()) if path else INITIAL
    return dg.Definitions(assets=graph(state["values"], state["code"]))


defs = _from_file()
