"""TrainedComponent: the typed result every trainer hands the bundle, and its JSON form."""

from pathlib import Path

import pytest
from routeforge.artifacts.bundle.writer import ComponentSource
from routeforge.core.components import TrainedComponent, flatten
from routeforge.pipelines.io_managers import JsonIOManager


def _result(name: str) -> TrainedComponent:
    return TrainedComponent([ComponentSource(name, "knn_estimator", "faiss+parquet+json", Path(f"/c/{name}"),
                                             {"m": 1.0}, {"k": 3})],
                            {f"{name}/m": 1.0}, [Path(f"/p/{name}.png")], {"evaluation": {"n": 2}})


def test_json_round_trip_keeps_every_field():
    original = _result("a")
    again = TrainedComponent.from_json(original.to_json())
    assert again == original and again.folder == Path("/c/a")
    with pytest.raises(ValueError, match="type tag"):
        TrainedComponent.from_json({"components": []})


def test_flatten_takes_partitioned_inputs_in_partition_order():
    a, b, c = _result("a"), _result("b"), _result("c")
    assert flatten([a, {"tier-2": c, "tier-1": b}, None]) == [a, b, c]
    with pytest.raises(TypeError, match="expected TrainedComponent"):
        flatten([{"x": "not a result"}])


def test_json_io_manager_restores_the_type(tmp_path):
    from upath import UPath

    io = JsonIOManager(base_path=UPath(tmp_path))
    path = UPath(tmp_path) / "knn.json"
    io.dump_to_path(None, _result("a"), path)
    assert io.load_from_path(None, path) == _result("a")
    io.dump_to_path(None, {"plain": 1}, path)
    assert io.load_from_path(None, path) == {"plain": 1}


@pytest.mark.parametrize("keys", [["only"], ["a", "b"]])
def test_a_step_reading_every_partition_gets_a_dict_also_when_there_is_one(tmp_path, keys):
    """A fleet of one model or one profiled tier: the step that reads every partition still gets
    {partition: value} (UPathIOManager alone hands a single partition over bare)."""
    import dagster as dg
    from upath import UPath

    parts = dg.StaticPartitionsDefinition(keys)

    @dg.asset(partitions_def=parts, io_manager_key="json_io")
    def per_tier(context: dg.AssetExecutionContext) -> dict:
        return {"tier": context.partition_key}

    @dg.asset(io_manager_key="json_io")
    def every_tier(per_tier: dict) -> list:
        return sorted((key, value["tier"]) for key, value in per_tier.items())

    resources = {"json_io": JsonIOManager(base_path=UPath(tmp_path))}
    for key in keys:
        assert dg.materialize([per_tier], partition_key=key, resources=resources).success
    result = dg.materialize([per_tier, every_tier], selection=[every_tier], resources=resources)
    assert result.output_for_node("every_tier") == [(k, k) for k in keys]
