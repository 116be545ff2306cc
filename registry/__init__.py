"""Writing to the model registry: publishing bundles as MLflow models, the release gate, and the
`routeforge bundle promote / rollback` commands. Beside the runtime (`routeforge.artifacts`), not in
it: a router service only reads the registry, and installs neither this nor full MLflow."""
