"""`pipelines.stale` judges staleness from the provenance Dagster records on each materialization,
through Dagster's public API: a code version unlike the recorded one, an input with another data
version, a partition of an input materialized again with another data version; a re-materialized
input whose data version did not change makes nothing stale. On a three-asset graph in an ephemeral
instance (the demo's end-to-end test holds the planner to the UI's verdict on the real graph)."""
import dagster as dg
import pytest
from routeforge.pipelines.stale import Versions, stale_causes

LETTERS = dg.StaticPartitionsDefinition(["x", "y"])
VALUES = {"a": "1", "b": "1"}


def graph(c_code: str = "1"):
    @dg.asset(code_version="1")
    def a():
        return dg.Output(VALUES["a"], data_version=dg.DataVersion(VALUES["a"]))

    @dg.asset(code_version="1", partitions_def=LETTERS)
    def b(context: dg.AssetExecutionContext, a):
        value = f"{a}{context.partition_key}{VALUES['b']}"
        return dg.Output(value, data_version=dg.DataVersion(value))

    @dg.asset(code_version=c_code)
    def c(b):
        return len(b)

    return [a, b, c]


def materialize(instance, assets, selection, partition=None):
    result = dg.materialize(assets, instance=instance, selection=selection, partition_key=partition)
    assert result.success


@pytest.fixture
def instance():
    VALUES.update(a="1", b="1")
    with dg.instance_for_test() as instance:
        yield instance


def causes(instance, assets, name, partition=None):
    versions = Versions(dg.Definitions(assets=assets), instance)
    key = dg.AssetKey(name)
    if versions.record(key, partition) is None:
        return "missing"
    return stale_causes(versions, key, partition)


def test_staleness_follows_code_versions_and_input_data_versions(instance):
    assets = graph()
    assert causes(instance, assets, "a") == "missing" and causes(instance, assets, "b", "x") == "missing"
    materialize(instance, assets, "a")
    for letter in ("x", "y"):
        materialize(instance, assets, "b", letter)
    materialize(instance, assets, "c")
    assert [causes(instance, assets, n, p) for n, p in (("a", None), ("b", "x"), ("b", "y"), ("c", None))] == [[]] * 4
    # a new code version of c: c alone is stale, for that reason
    assert causes(instance, graph(c_code="2"), "c") == ["has a new code version"]
    assert causes(instance, graph(c_code="2"), "b", "x") == []
    # `a` materialized again with the same data version: nothing downstream is stale
    materialize(instance, assets, "a")
    assert causes(instance, assets, "b", "x") == []
    # with another data version: every partition of b reads it
    VALUES["a"] = "2"
    materialize(instance, assets, "a")
    assert causes(instance, assets, "b", "x") == causes(instance, assets, "b", "y") == [
        "has a new dependency data version (a)"]
    assert causes(instance, assets, "c") == []  # b has not changed yet
    # one partition of b rebuilt: c reads every partition, so c is stale; b[y] still waits on a
    materialize(instance, assets, "b", "x")
    assert causes(instance, assets, "b", "x") == []
    assert causes(instance, assets, "b", "y") == ["has a new dependency data version (a)"]
    assert causes(instance, assets, "c") == ["has a new dependency data version (b)"]


def test_a_partition_rebuilt_with_the_same_data_version_leaves_its_readers_up_to_date(instance):
    assets = graph()
    materialize(instance, assets, "a")
    for letter in ("x", "y"):
        materialize(instance, assets, "b", letter)
    materialize(instance, assets, "c")
    materialize(instance, assets, "b", "y")  # same inputs, same data version
    assert causes(instance, assets, "c") == []
    VALUES["b"] = "2"
    materialize(instance, assets, "b", "y")
    assert causes(instance, assets, "c") == ["has a new dependency data version (b)"]
