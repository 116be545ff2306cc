"""`python -m routeforge.artifacts.cli`: the `routeforge` command."""

from routeforge.artifacts.cli.commands import main

if __name__ == "__main__":  # the component registry imports every module of the package: never run then
    main()
