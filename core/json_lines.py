"""Strict decoding of one JSON-lines record: kept in the runtime layer (`routeforge.artifacts.common.json_lines`)
so that the runtime's own readers (`bundle replay`, `bundle calibrate`) quarantine exactly the lines the
pipeline's readers do; re-exported here for the pipeline's modules."""

from routeforge.artifacts.common.json_lines import LineError, bounded_lines, strict_json, surrogate_field

__all__ = ["LineError", "bounded_lines", "strict_json", "surrogate_field"]
