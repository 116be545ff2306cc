"""routeforge: the one installed package.

The repository keeps the folders the product brief names at its root (`pipelines/`, `assets/`,
`training/`, `profiling/`, `artifacts/`, ...); the distribution maps each of them under this name
(`routeforge.pipelines`, `routeforge.artifacts`, ...: `[tool.setuptools.package-dir]` in
pyproject.toml), so an install adds this one top-level name to site-packages and nothing generic
like `core` or `training` that could collide with another project's.

A router service needs only `routeforge.artifacts` (the runtime: `pip install routeforge`); the
training pipeline is the `pipeline` extra (`pip install 'routeforge[pipeline]'`).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("routeforge")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
