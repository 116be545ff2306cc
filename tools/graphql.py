"""A caller of a Dagster webserver's GraphQL API, for the tests and benchmarks that ask a real webserver
what the UI shows (job pages, stale status)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable


def graphql_caller(url: str, timeout_s: float = 60) -> Callable[[str], dict]:
    """`call(query) -> data` against the webserver at `url`; a GraphQL error is raised with its message
    rather than returned as a missing field."""

    def call(query: str) -> dict:
        request = urllib.request.Request(f"{url}/graphql", data=json.dumps({"query": query}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            answer = json.loads(response.read())
        if answer.get("errors"):
            raise RuntimeError(f"GraphQL: {answer['errors'][0].get('message')}")
        return answer["data"]

    call.url = url  # the UI's own address, for a browser
    return call
