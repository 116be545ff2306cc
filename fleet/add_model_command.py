"""`add_model_command` with every kind loaded first (`routeforge.fleet`): the entry point pyproject.toml names."""

import routeforge.fleet  # noqa: F401
from routeforge.training.predictors.add_model_version import add_model_command

__all__ = ["add_model_command"]
