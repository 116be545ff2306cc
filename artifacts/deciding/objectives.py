"""One vocabulary of routing objectives for every command, the fleet file and the bundle.

The names are the evaluation's own metric names, the ones its JSON, `simulator.json` and
`training.routing_evaluation.objective` use: the shares of offered requests (`goodput`,
`quality_goodput`, `slo_attainment`, `qos_mean`, `quality_mean`) and the latencies, over offered
requests (`e2e_*_offered_s`: a request not served missed its SLO) or over served ones alone
(`e2e_*_s`, `ttft_mean_s`). `policies evaluate` once took 24 near-synonyms; the short names it took
(`e2e_mean`, `qos`, `slo`, `e2e_p99_served`, …) are still accepted, with a note naming the metric.
"""

from __future__ import annotations

import click

# objective → True where higher is better
HIGHER_IS_BETTER = {"goodput": True, "quality_goodput": True, "qos_mean": True, "slo_attainment": True,
                    "quality_mean": True, "e2e_mean_offered_s": False, "e2e_p50_offered_s": False,
                    "e2e_p95_offered_s": False, "e2e_p99_offered_s": False, "e2e_mean_s": False,
                    "e2e_p95_s": False, "e2e_p99_s": False, "ttft_mean_s": False}
DEFAULT = "goodput"
# the short names `policies evaluate` took before: accepted, said as the metric they mean
OLD_NAMES = {"e2e_mean": "e2e_mean_offered_s", "e2e_p50": "e2e_p50_offered_s", "e2e_p95": "e2e_p95_offered_s",
             "e2e_p99": "e2e_p99_offered_s", "e2e_mean_served": "e2e_mean_s", "e2e_p95_served": "e2e_p95_s",
             "e2e_p99_served": "e2e_p99_s", "ttft_mean_served": "ttft_mean_s", "slo": "slo_attainment",
             "qos": "qos_mean", "quality": "quality_mean"}


def canonical(name: str) -> str:
    """The objective `name` means; an unknown one is a ValueError listing the names."""
    if name in HIGHER_IS_BETTER:
        return name
    if name in OLD_NAMES:
        return OLD_NAMES[name]
    import difflib

    close = difflib.get_close_matches(name, [*HIGHER_IS_BETTER, *OLD_NAMES], n=1)
    hint = f" (did you mean {(OLD_NAMES.get(close[0], close[0]))!r}?)" if close else ""
    raise ValueError(f"unknown objective {name!r}{hint}; objectives: {', '.join(HIGHER_IS_BETTER)}")


def option_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """`--objective` of every command: the canonical name; an old one noted on stderr."""
    if value is None:
        return None
    try:
        metric = canonical(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if metric != value:
        click.echo(f"note: --objective {value} is {metric} (the name every command uses)", err=True)
    return metric


def objective_option(help_text: str, default: str | None = DEFAULT):
    """The `--objective` option, its help listing the names."""
    return click.option("--objective", default=default, show_default=default is not None, metavar="OBJECTIVE",
                        callback=option_callback,
                        help=f"{help_text} One of: {', '.join(HIGHER_IS_BETTER)}.")
