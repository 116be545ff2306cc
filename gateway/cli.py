"""`routeforge gateway REF --backend TIER=URL ...`: the gateway, from a registered (or local) bundle.

Each backend serves as one instance of the bundle's simulated fleet, named by its tier (the tier's
step fit is what the dispatcher predicts with, and what the bundle's policies were evaluated on); the
bundle's instances are listed by `routeforge bundle inspect --all` and in a mismatch's error. The
bundle is verified before the gateway answers anything, signature required (`--public-key`, else the
pinned keys): there is no way to skip it here.
"""

from __future__ import annotations

import logging
from pathlib import Path

import click
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.artifacts.cli.commands import PUBLIC_KEY_OPTION, TRACKING_OPTION
from routeforge.artifacts.common.state_folder import state_root
from routeforge.gateway.decision_log import DecisionLog


def backends_for(instances: list[dict], models: list[str], specs: tuple[str, ...]) -> list:
    """One `Backend` per instance of the bundle's fleet, from `TIER=URL` specs (a tier with several
    instances takes as many specs, in order). Any mismatch is one error naming the instances."""
    from routeforge.gateway.backends import Backend  # lazy: aiohttp, numpy on first use

    listed = ", ".join(f"{k}: {i['tier']}" for k, i in enumerate(instances))
    open_slots: dict[str, list[int]] = {}
    for k, instance in enumerate(instances):
        open_slots.setdefault(instance["tier"], []).append(k)
    assigned: dict[int, str] = {}
    for spec in specs:
        tier, sep, url = spec.partition("=")
        if not sep or not url.startswith(("http://", "https://")):
            raise click.BadParameter(f"{spec!r}: TIER=URL, e.g. {instances[0]['tier']}=http://127.0.0.1:8000",
                                     param_hint="--backend")
        if tier not in open_slots:
            raise click.BadParameter(f"{tier!r} is not a tier of the bundle's fleet (instances {listed})",
                                     param_hint="--backend")
        if not open_slots[tier]:
            raise click.BadParameter(f"more backends for {tier!r} than the bundle's fleet has instances of it "
                                     f"(instances {listed})", param_hint="--backend")
        assigned[open_slots[tier].pop(0)] = url.rstrip("/").removesuffix("/v1")
    missing = [f"{k}: {instances[k]['tier']}" for k in range(len(instances)) if k not in assigned]
    if missing:
        raise click.BadParameter(f"no backend for instance(s) {', '.join(missing)}: the bundle's policies decide over "
                                 f"its fleet's {len(instances)} instances ({listed}), one --backend each",
                                 param_hint="--backend")
    return [Backend(instances[k]["tier"], assigned[k], k, models[instances[k]["model_index"]],
                    int(instances[k].get("max_running") or 0) or 1) for k in range(len(instances))]


@click.command()
@click.argument("ref")
@click.option("--backend", "backend_specs", multiple=True, required=True, metavar="TIER=URL",
              help="A serving backend (its base URL, OpenAI-compatible) as an instance of the bundle's tier TIER; "
                   "one per instance of the bundle's fleet.")
@click.option("--policy", default=None, help="The routing policy (default: the bundle's recommendation): any policy "
                                             "the bundle carries, or a registered heuristic by name.")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to bind.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--log", "log_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The decision log (JSON lines; default: $ROUTEFORGE_STATE/gateway/decisions.jsonl).")
@click.option("--max-in-flight", default=256, show_default=True, type=click.IntRange(1),
              help="Requests held at once; beyond them 503 with Retry-After.")
@click.option("--max-body-bytes", default=4 << 20, show_default=True, type=click.IntRange(1024),
              help="The largest request body (413 beyond).")
@click.option("--backend-timeout", default=120.0, show_default=True, type=click.FloatRange(0.1),
              help="Seconds a backend may go without sending a byte before it is marked down.")
@click.option("--scrape-interval", default=0.1, show_default=True, type=click.FloatRange(0.01),
              help="Seconds between scrapes of each backend's /metrics (vLLM's CPU build renders it on the "
                   "engine's own cores, 10-50 ms each: scrape it every 0.5 s or more there).")
@click.option("--probe-interval", default=2.0, show_default=True, type=click.FloatRange(0.1),
              help="Seconds between probes of a backend marked down.")
@click.option("--block-tokens", default=16, show_default=True, type=click.IntRange(1),
              help="Tokens per prefix block of a token-id prompt (the backends' KV block size).")
@click.option("--estimates", type=click.Choice(["router", "request"]), default=None,
              help="Per-prompt quality and length from the bundle's router (costs an embedding per request), or "
                   "from the request's max_tokens alone (default: router where the backends serve several models).")
@click.option("--check-only", is_flag=True, help="Verify the bundle and the backends, print the plan, serve nothing.")
@click.option("--public-key", **PUBLIC_KEY_OPTION)
@TRACKING_OPTION
def gateway(ref: str, backend_specs: tuple[str, ...], policy: str | None, host: str, port: int, log_path: Path | None,
            max_in_flight: int, max_body_bytes: int, backend_timeout: float, scrape_interval: float,
            probe_interval: float, block_tokens: int, estimates: str | None, check_only: bool,
            public_key: Path | None, tracking_uri: str | None) -> None:
    """An OpenAI-compatible router in front of BACKENDs, deciding each request with bundle REF
    (models:/<name>@<alias> or a folder): /v1/completions and /v1/chat/completions (streams passed
    through), /v1/models, /health, /metrics, /v1/feedback. Every decision goes to the log that
    `routeforge bundle replay` reads."""
    from aiohttp import web
    from routeforge.gateway.backends import BackendPool  # lazy: aiohttp, numpy on first use
    from routeforge.gateway.server import Gateway, Settings  # lazy: aiohttp, numpy on first use

    bundle = load_bundle(ref, tracking_uri=tracking_uri, public_key=public_key)  # signature required
    try:
        sim = bundle.simulator_spec()
    except KeyError:
        raise click.ClickException(f"bundle {bundle.manifest.name} has no routing simulator (no fleet of instances to "
                                   "route over): train it with a routing evaluation") from None
    instances = [dict(i, max_running=sim["queue_capacity"]) for i in sim["instances"]]
    backends = backends_for(instances, sim["models"], backend_specs)
    settings = Settings(max_in_flight=max_in_flight, max_body_bytes=max_body_bytes, read_timeout_s=backend_timeout,
                        block_tokens=block_tokens, estimates=estimates)
    path = log_path or state_root() / "gateway" / "decisions.jsonl"
    pool = BackendPool(backends, scrape_interval_s=scrape_interval, probe_interval_s=probe_interval)
    try:
        app = Gateway(bundle, pool, DecisionLog(None if check_only else path), settings, policy)
    except (KeyError, ValueError) as exc:
        raise click.ClickException(str(exc.args[0] if isinstance(exc, KeyError) else exc)) from None
    plan = [f"bundle {bundle.manifest.name} (content digest {bundle.manifest.version}), verified",
            f"policy {app.dispatcher.policy_name}" + "".join(f"; {n}" for n in app.dispatcher.notes),
            f"estimates from the {app.estimates}", *(f"  instance {b.instance}: {b.name} ({b.model}) at {b.url}"
                                                     for b in backends),
            f"decision log {path}", f"listening on http://{host}:{port}"]
    if check_only:
        click.echo("\n".join(plan[:-2]))
        return
    click.echo("\n".join(plan), err=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    web.run_app(app.app(), host=host, port=port, print=None, access_log=None)
