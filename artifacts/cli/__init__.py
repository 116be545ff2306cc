"""The `routeforge` command (`commands`) and what it prints for people (`bundle_summary`, `narrow_output`)."""
