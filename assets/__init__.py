"""routeforge."""
