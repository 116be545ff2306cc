"""`policies` with every kind loaded first (`routeforge.fleet`): the entry point pyproject.toml names."""

import routeforge.fleet  # noqa: F401
from routeforge.training.policies.cli import policies

__all__ = ["policies"]
