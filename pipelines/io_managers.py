"""IO managers: Arrow tables as Parquet (schema-versioned) and small results as JSON.

Both extend Dagster's UPathIOManager, so partitions map to files (`responses/<model>.parquet`) and a
downstream asset that reads every partition receives a `{partition: value}` dict. UPath also makes
the same code write to object storage when `base_path` is an `s3://`/`gs://` URI.
"""

from __future__ import annotations

import json
from typing import Any

import dagster as dg
import pyarrow as pa
from routeforge.core.components import TYPE_TAG, TrainedComponent
from routeforge.core.storage import read_parquet, write_parquet
from upath import UPath


def column_schema(schema: pa.Schema) -> dg.TableSchema:
    """The table's columns, Arrow types and nullability as Dagster's column schema: what the UI
    shows on the asset's page and in lineage, taken from the table written, so it cannot drift."""
    return dg.TableSchema(columns=[
        dg.TableColumn(field.name, str(field.type), constraints=dg.TableColumnConstraints(nullable=field.nullable))
        for field in schema])


class _EveryPartitionAsDict(dg.UPathIOManager):
    """A step that is not itself partitioned and reads every partition of an upstream asset gets
    `{partition: value}`, also when the fleet has one partition (one model, one profiled tier):
    UPathIOManager hands the single value over bare, which broke such fleets' consumers (their
    inputs are typed as dicts). A partitioned step reading its own partition keeps the bare value."""

    def load_partitions(self, context: dg.InputContext):
        loaded = super().load_partitions(context)
        keys = context.asset_partition_keys
        if len(keys) == 1 and not context.has_partition_key:
            return {keys[0]: loaded}
        return loaded


class ParquetIOManager(_EveryPartitionAsDict):
    extension = ".parquet"

    def dump_to_path(self, context: dg.OutputContext, obj: pa.Table, path: UPath) -> None:
        if not isinstance(obj, pa.Table):
            raise TypeError(f"{context.asset_key.to_user_string()}: expected a pyarrow.Table, got {type(obj)}")
        write_parquet(obj, path)
        context.add_output_metadata({"dagster/column_schema": column_schema(obj.schema),
                                     "dagster/row_count": obj.num_rows})

    def load_from_path(self, context: dg.InputContext, path: UPath) -> pa.Table:
        return read_parquet(path)


class JsonIOManager(_EveryPartitionAsDict):
    extension = ".json"

    def dump_to_path(self, context: dg.OutputContext, obj: Any, path: UPath) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(obj, TrainedComponent):
            obj = obj.to_json()
        path.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str))

    def load_from_path(self, context: dg.InputContext, path: UPath) -> Any:
        """JSON, and a `TrainedComponent` where the file carries its type tag."""
        data = json.loads(path.read_text())
        if isinstance(data, dict) and data.get("__type__") == TYPE_TAG:
            return TrainedComponent.from_json(data)
        return data
