"""`routeforge` command: inspect, verify, download bundles and query their KNN estimator."""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import click
from routeforge.artifacts.bundle.bundle_cache import BundleCache
from routeforge.artifacts.bundle.download import bundle_folder, download_bundle, fetch_verified, with_shared_components
from routeforge.artifacts.bundle.keyring import load_keyring, pin, unpin
from routeforge.artifacts.bundle.loader import load_bundle
from routeforge.artifacts.bundle.model_record import local_model_files, verify_model_record, version_record_problem
from routeforge.artifacts.bundle.registry import (
    DEFAULT_TIMEOUT_S,
    TIMEOUT_ENV,
    _use_tracking,
    check_version_location,
    download_artifacts,
    download_manifest,
    is_remote_uri,
    recorded_public_key,
    registered_version,
)
from routeforge.artifacts.bundle.registry_rest import models_ref
from routeforge.artifacts.bundle.signing import generate_key_pair, rotate_key
from routeforge.artifacts.bundle.verification import (
    BundleVerificationError,
    listed_paths,
    no_key_message,
    read_manifest,
    resolve_key,
    signer_id,
    verify_bundle,
)
from routeforge.artifacts.cli.bundle_summary import every_metric, summary, with_unit
from routeforge.artifacts.cli.narrow_output import NarrowStream
from routeforge.artifacts.common import strict_json, temporary
from routeforge.artifacts.common.state_folder import default_tracking_uri
from routeforge.artifacts.deciding.objectives import objective_option
from routeforge.artifacts.deciding.recommendation import STAT_KEYS
from routeforge.artifacts.operating.traffic_prompts import logged_prompts


def _tracking_default(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--tracking-uri (or $MLFLOW_TRACKING_URI, click's envvar), else where `load_bundle` looks too
    (`state_folder.default_tracking_uri`: the store a pipeline run recorded for the reference's model,
    the project's local store when it exists; it follows $ROUTEFORGE_STATE)."""
    if value:
        return value

    # the reference comes first on the command line, so it is parsed before this default is filled
    params = ctx.params if ctx is not None else {}
    refs = [v for v in params.values() if isinstance(v, str) and v.startswith("models:/")]
    return default_tracking_uri(models_ref(refs[0])[0] if refs else None)


TRACKING_OPTION = _TRACKING = click.option(
    "--tracking-uri", envvar="MLFLOW_TRACKING_URI", default=None, callback=_tracking_default,
    help="MLflow tracking URI for models:/ references (default: $MLFLOW_TRACKING_URI, else the store the "
         "last pipeline run registered the model in, else $ROUTEFORGE_STATE/mlflow.db or ./.state/mlflow.db).",
)


def signature_options(command):
    """`--public-key` and `--insecure-skip-signature` for every command that reads a bundle; the
    command receives `public_key` and `allow_unsigned` (see `verification.verify_bundle`)."""
    command = click.option(
        "--insecure-skip-signature", "allow_unsigned", is_flag=True,
        help="Load a bundle whose signature cannot be checked (unsigned, or no trusted key): checksums only. "
             "Said on standard error.")(command)
    return click.option("--public-key", **PUBLIC_KEY_OPTION)(command)


PUBLIC_KEY_OPTION = dict(
    type=click.Path(exists=True, path_type=Path), default=None, envvar="ROUTEFORGE_PUBLIC_KEY",
    help="Ed25519 public key (PEM), or a folder of them, the bundle must be signed by (default: "
         "$ROUTEFORGE_PUBLIC_KEY, else the pinned keys: `routeforge keys list`). The store's recorded key is never "
         "trusted by itself. Without any, the bundle is refused.")


PLUGIN_GROUP = "routeforge.commands"  # entry points adding commands from higher layers (`config`)
BUNDLE_PLUGIN_GROUP = "routeforge.bundle_commands"  # and to `bundle` (`promote`, `rollback`)


def _plugins(group: str) -> dict[str, object]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=group)}


class _PluginGroup(click.Group):
    """A group whose commands may also come from an entry-point group, loaded only when named, so
    the runtime does not import the pipeline's or the registry's code to inspect or verify a bundle."""

    plugin_group = BUNDLE_PLUGIN_GROUP

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_plugins(self.plugin_group)})

    def get_command(self, ctx: click.Context, name: str):
        command = super().get_command(ctx, name)
        if command is None and name in (plugins := _plugins(self.plugin_group)):
            command = plugins[name].load()
        return command


class _OneLineErrors(_PluginGroup):
    """Any error a command raises ends as one line on stderr and exit code 1 (usage errors: 2);
    `--debug` (or $ROUTEFORGE_DEBUG=1) shows the traceback instead. Top-level commands may come from
    the `routeforge.commands` entry point group (the pipeline's `config` and `policies`)."""

    plugin_group = PLUGIN_GROUP

    def invoke(self, ctx: click.Context):
        temporary.sweep()  # what killed commands and runs left in the temporary folder
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:
            if (ctx.obj or {}).get("debug"):
                raise
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            click.echo(f"error: {message}", err=True)
            ctx.exit(1)


def _estimate_flags(e) -> str:
    """What an off-policy estimate's guards did, said after it (`artifacts.operating.off_policy`)."""
    flags = [f"{e.below_floor} lines below the propensity floor not used"] if e.below_floor else []
    flags += ["thin: the interval is the outcome range"] if e.thin else []
    flags += ["OUTSIDE the outcome range"] if e.outside_range else []
    return f"  ({'; '.join(flags)})" if flags else ""


class Finite(click.ParamType):
    """A finite number within [low, high]: NaN and ±inf are refused (a NaN budget once read as no
    budget and was reported as met)."""

    name = "number"

    def __init__(self, low: float = -math.inf, high: float = math.inf):
        self.low, self.high = low, high

    def convert(self, value, param, ctx):
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number) or not self.low <= number <= self.high:
            self.fail(f"{value!r} is not a finite number in [{self.low:g}, {self.high:g}]", param, ctx)
        return number


@click.group(cls=_OneLineErrors)
@click.version_option(package_name="routeforge", message="routeforge %(version)s")
@click.option("--debug", is_flag=True, envvar="ROUTEFORGE_DEBUG", help="Show the traceback of an error.")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=DEFAULT_TIMEOUT_S, show_default=True,
              envvar=TIMEOUT_ENV, help="Seconds to wait for a tracking server before failing (one line).")
@click.option("--wide", is_flag=True,
              help="Print long lines whole (on a terminal every line of output is at most 120 characters; "
                   "$ROUTEFORGE_WIDE=1 or 0 decides for a pipe too).")
@click.pass_context
def main(ctx: click.Context, debug: bool, timeout: float, wide: bool) -> None:
    """routeforge: router bundles trained by the routeforge pipeline."""
    ctx.obj = {"debug": debug}
    setting = os.environ.get("ROUTEFORGE_WIDE")
    narrowed = not wide and (setting == "0" or (setting != "1" and sys.stdout.isatty()))
    if narrowed and not isinstance(sys.stdout, NarrowStream):
        wrapped, sys.stdout = sys.stdout, NarrowStream(sys.stdout)

        def restore() -> None:
            sys.stdout.flush()
            sys.stdout = wrapped

        ctx.call_on_close(restore)
    # one bounded attempt per request instead of MLflow's minutes of retries with backoff
    os.environ[TIMEOUT_ENV] = f"{timeout:g}"
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", f"{max(1, round(timeout))}")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    if not sys.stderr.isatty():  # progress bars only on a terminal; a log file gets none
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


@main.group(cls=_PluginGroup)
def bundle() -> None:
    """Work with router bundles (a folder or models:/<name>@<alias>)."""


@bundle.command()
@click.argument("ref")
@click.option("--all", "show_all", is_flag=True, help="Every metric of every component, with its unit.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole manifest as JSON.")
@_TRACKING
def inspect(ref: str, show_all: bool, as_json: bool, tracking_uri: str | None) -> None:
    """What the bundle holds, for an operator: its estimators' test quality, each tier's latency
    error, the recommended routing policy, lineage and provenance, with units (`--all`: every
    metric of every component). A registered bundle's manifest is downloaded alone (not its files)."""
    manifest = read_manifest(download_manifest(ref, tracking_uri) if is_remote_uri(ref) else Path(ref))
    if as_json:
        click.echo(strict_json.dumps(manifest.to_dict(), indent=2))
        return
    registry = registered_version(ref) if ref.startswith("models:/") else None
    for line in (every_metric if show_all else summary)(manifest, registry):
        click.echo(line)


@bundle.command()
@click.argument("ref")
@signature_options
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@_TRACKING
def verify(ref: str, public_key: Path | None, allow_unsigned: bool, as_json: bool, tracking_uri: str | None) -> None:
    """Check the manifest's signature, schema version and every file's sha256; exit 1 naming the
    offending files or the reason the signature is refused (no trusted key is a refusal too)."""
    try:
        key = resolve_key(ref, public_key, tracking_uri, allow_unsigned)
        root, manifest = fetch_verified(ref, None, tracking_uri, key, allow_unsigned)
        if key is not None and str(ref).startswith("models:/"):  # MLmodel and the environment files too

            problem = verify_model_record(ref, key, manifest, tracking_uri)
            if problem is not None:
                raise BundleVerificationError(f"registered model {ref} refused: {problem}")
    except BundleVerificationError as exc:
        if as_json:
            click.echo(strict_json.dumps({"ok": False, "ref": ref, "error": str(exc)}))
        else:
            click.echo(f"FAILED: {exc}", err=True)
        sys.exit(1)
    n = sum(len(c.files) for c in manifest.components)
    source = f"pinned key {signer_id(root)} ({', '.join(key.places)})" if key is not None else None
    if as_json:
        click.echo(strict_json.dumps({"ok": True, "ref": ref, "name": manifest.name, "version": manifest.version,
                                      "files": n, "signature": "valid" if key is not None else "not checked"}))
        return
    signed = (f"; signature by {source} valid" if key is not None
              else " (signature NOT checked: --insecure-skip-signature)")
    if key is not None and str(ref).startswith("models:/"):
        signed += "; MLmodel and environment files match the signed model record"
    click.echo(f"OK: {manifest.name} content digest {manifest.version}, {n} files verified{signed}")


@main.command()
@click.argument("ref")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address the scoring server binds.")
@click.option("--port", default=5001, show_default=True, type=click.IntRange(1, 65535))
@click.option("--dst", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the verified copy of the model is kept (default: a new temporary folder).")
@click.option("--check-only", is_flag=True,
              help="Download and verify, print the verified copy and the server command, start nothing.")
@click.option("--public-key", **PUBLIC_KEY_OPTION)
@_TRACKING
def serve(ref: str, host: str, port: int, dst: Path | None, check_only: bool, public_key: Path | None,
          tracking_uri: str | None) -> None:
    """Serve a registered bundle (models:/<name>@<alias>) with MLflow's scoring server, from a copy
    verified before MLflow reads any of it: the whole version downloaded once, its bundle's signature
    and files checked, and its MLmodel and environment files checked against the signed model record;
    then `mlflow models serve` on that local copy only. There is no way to skip the signature here."""
    import subprocess


    if not ref.startswith("models:/"):
        raise click.UsageError("serve takes a models:/ reference; for a bundle folder, load it with load_bundle")
    key = resolve_key(ref, public_key, tracking_uri)
    if key is None:
        raise click.ClickException(f"{ref} refused: {no_key_message()}")
    _use_tracking(ref, tracking_uri)
    name, version = registered_version(ref)
    try:
        check_version_location(name, version)
    except ValueError as exc:
        raise click.ClickException(f"{ref} refused: {exc}") from None
    folder = Path(dst) if dst else temporary.folder("serve")
    local = download_artifacts(f"models:/{name}/{version}", folder / "model")
    try:
        manifest = verify_bundle(with_shared_components(bundle_folder(local), in_place=False, public_key=key), key)
        files = local_model_files(local, listed_paths(manifest), name, version)  # the very files MLflow gets
        problem = version_record_problem(name, version, key, manifest, files)
    except (BundleVerificationError, ValueError) as exc:
        raise click.ClickException(f"{ref} refused: {exc}") from None
    if problem is not None:
        raise click.ClickException(f"{ref} refused: {problem}")
    key_file = folder / "pinned-keys"  # the keys this check trusted: the pyfunc loader's only ones
    key_file.mkdir(exist_ok=True)
    for kid, pem in key.keys.items():
        (key_file / f"{kid}.pub").write_bytes(pem)
    command = [sys.executable, "-m", "mlflow", "models", "serve", "-m", str(local), "--env-manager", "local",
               "-h", host, "-p", str(port)]
    click.echo(f"verified {name} version {version} (content digest {manifest.version}) in {local}", err=True)
    if check_only:
        click.echo(" ".join(command))
        return
    # the pyfunc loader checks the bundle again; MLflow starts `uvicorn` by name, found beside this interpreter
    # even when its environment is not activated
    env = {**os.environ, "ROUTEFORGE_PUBLIC_KEY": str(key_file),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    sys.exit(subprocess.call(command, env=env))


@bundle.command()
@click.argument("ref")
@click.argument("dst", type=click.Path(file_okay=False, path_type=Path))
@_TRACKING
def download(ref: str, dst: Path, tracking_uri: str | None) -> None:
    """Download a registered bundle into DST (not verified; run `verify` on DST)."""
    path = download_bundle(ref, dst, tracking_uri)
    click.echo(str(path))


# what a prediction rests on, per prompt: said by `predict`, so identical numbers for different prompts
# (a fallback) are not mistaken for an estimate
BASIS_WORDS = {"recalled": "a known prompt: its observed scores", "unseen_task": "FALLBACK: far from every "
               "training task, routed by the unseen-task rule", "cluster_guard": "its cluster's training means "
               "(the guard found no reliable gain from the estimator there)", "estimate": "the estimator's estimate"}


def _basis(prediction, i: int) -> str:
    for name, attribute in (("recalled", "recalled"), ("unseen_task", "unseen"), ("cluster_guard", "guarded")):
        flags = getattr(prediction, attribute, None)
        if flags is not None and bool(flags[i]):
            return name
    return "estimate"


@bundle.command()
@click.argument("ref")
@click.argument("prompts", nargs=-1, required=True)
@click.option("--lam", type=Finite(0.0, 1e12), default=0.0, show_default=True,
              help="cost weight λ in quality − λ·cost")
@click.option("--budget-per-1k", type=Finite(0.0, 1e12), default=None,
              help="Instead of --lam: the most cost per 1,000 requests (the router's calibration table picks λ).")
@click.option("--max-share", "max_shares", multiple=True, metavar="MODEL=SHARE",
              help="Instead of --lam: the most share of traffic MODEL may take (repeat it).")
@click.option("--min-quality", type=Finite(), default=None, help="Instead of --lam: the least expected quality.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per prompt (unknown numbers are null).")
@signature_options
@_TRACKING
def predict(ref: str, prompts: tuple[str, ...], lam: float, budget_per_1k: float | None, max_shares: tuple[str, ...],
            min_quality: float | None, as_json: bool, public_key: Path | None, allow_unsigned: bool,
            tracking_uri: str | None) -> None:
    """Predicted per-model quality, output tokens and cost for PROMPTS, and the chosen model: by the
    bundle's router where it has one (chosen by cross-validation), else by its KNN estimator. A
    target (--budget-per-1k, --max-share, --min-quality) picks λ and says what to expect of it."""
    from routeforge.artifacts.deciding.budget import TargetUnreachable  # lazy: numpy on first use

    shares = _numbers(max_shares, "--max-share", 0.0, 1.0) or None  # argument errors before any store is read
    loaded = load_bundle(ref, tracking_uri=tracking_uri, public_key=public_key, allow_unsigned=allow_unsigned)
    try:
        routing = loaded.route(list(prompts), lam, budget_per_1k=budget_per_1k, max_share=shares,
                               min_quality=min_quality)
    except (TargetUnreachable, KeyError, ValueError) as exc:
        raise click.ClickException(str(exc).strip('"')) from None
    pred, choice, estimator = routing.prediction, routing.choice, routing.estimator
    if routing.setting is not None:
        lam = routing.setting.lam
        if not as_json:
            click.echo(f"target {routing.setting.targets}: {routing.setting.describe()}")
    for i, text in enumerate(prompts):
        per_model = {m: {"quality": round(float(pred.quality[i, j]), 4),
                         "output_tokens": round(float(pred.output_tokens[i, j]), 1),
                         "cost": round(float(pred.cost[i, j]), 8)} for j, m in enumerate(pred.models)}
        basis = _basis(pred, i)
        if as_json:
            click.echo(strict_json.dumps({"prompt": text[:80], "route_to": choice[i], "estimator": estimator,
                                          "basis": basis, "models": per_model}))
            continue
        click.echo(f"{text[:60]!r} → {choice[i]} (by the {estimator}, λ = {lam:g}; {BASIS_WORDS[basis]})")
        for m, v in per_model.items():
            cells = [f"quality {'—' if v['quality'] != v['quality'] else v['quality']}",
                     f"{v['output_tokens']:g} output tokens", f"cost {with_unit('cost', v['cost'])}"]
            click.echo(f"  {m:<24} " + ", ".join(cells))


def _numbers(pairs: tuple[str, ...], what: str, low: float = -math.inf, high: float = math.inf) -> dict[str, float]:
    """`name=value` pairs as finite numbers in [low, high]; one line naming the pair that is not one."""
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            raise click.BadParameter(f"{pair!r}: expected name=number", param_hint=what) from None
        if not sep or not name.strip():
            raise click.BadParameter(f"{pair!r}: expected name=number", param_hint=what)
        if not math.isfinite(out[name.strip()]) or not low <= out[name.strip()] <= high:
            raise click.BadParameter(f"{pair!r}: the number must be finite and in [{low:g}, {high:g}]",
                                     param_hint=what)
    return out


@bundle.command()
@click.argument("ref")
@click.option("--tier", default=None, help="The tier (default: list the tiers and the features each takes).")
@click.option("--state", "states", multiple=True, metavar="NAME=VALUE",
              help="One feature of the state at dispatch (repeat it); every required feature must be given.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@signature_options
@_TRACKING
def latency(ref: str, tier: str | None, states: tuple[str, ...], as_json: bool, public_key: Path | None,
            allow_unsigned: bool, tracking_uri: str | None) -> None:
    """Predicted TTFT, TPOT and E2E (seconds) on a tier for one state at dispatch, by the bundle's
    latency heads; an unknown or missing feature is an error naming it."""
    loaded = load_bundle(ref, tracking_uri=tracking_uri, public_key=public_key, allow_unsigned=allow_unsigned)
    if tier is None:
        tiers = {t: loaded.latency(t).required_features() for t in loaded.tiers_with_latency}
        if as_json:
            click.echo(strict_json.dumps({"tiers": tiers}))
            return
        for name, features in tiers.items():
            click.echo(f"{name}: --state for each of {', '.join(features)}")
        return
    state = _numbers(states, "--state")
    out = {k: float(v[0]) for k, v in loaded.latency(tier).predict([state]).items()}
    if as_json:
        click.echo(strict_json.dumps({"tier": tier, "state": state, "seconds": out}))
        return
    click.echo(f"{tier}: " + ", ".join(f"{k} {v:.4g} s" for k, v in out.items()))


@bundle.command()
@click.argument("ref")
@click.option("--traffic", "stats", multiple=True, metavar="NAME=VALUE",
              help="A statistic of the traffic (arrival_cv, prompt_mean, output_mean, load, prefix_sharing); "
                   "repeat it.")
@objective_option("The objective the choice is best on (the bundle records goodput, quality_goodput, "
                  "e2e_mean_offered_s, e2e_p99_offered_s and qos_mean).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@signature_options
@_TRACKING
def policy(ref: str, stats: tuple[str, ...], objective: str, as_json: bool, public_key: Path | None,
           allow_unsigned: bool, tracking_uri: str | None) -> None:
    """The routing policy the bundle recommends, and with --traffic the one its evaluation found best
    for traffic like that (the nearest evaluated traffic by its online statistics)."""
    loaded = load_bundle(ref, tracking_uri=tracking_uri, public_key=public_key, allow_unsigned=allow_unsigned)
    overall = {**loaded.routing_recommendation, "policies": sorted(loaded.routing_policies)}
    if not overall.get("recommended_policy"):
        raise click.ClickException(f"bundle {loaded.manifest.name} carries no routing policies (trained without "
                                   "training.routing_evaluation)")

    traffic = _numbers(stats, "--traffic")
    if unknown := sorted(set(traffic) - set(STAT_KEYS)):
        raise click.BadParameter(f"unknown statistic(s) {unknown}; give any of {list(STAT_KEYS)}",
                                 param_hint="--traffic")
    per = loaded.recommended_policy_for(traffic, objective) if traffic else None
    if as_json:
        click.echo(strict_json.dumps({**overall, "for_traffic": per}))
        return
    click.echo(f"recommended: {overall['recommended_policy'].removeprefix('policy--')} by "
               f"{overall.get('objective', '?')} ({overall.get('recommendation', '')})")
    if per is not None:
        click.echo(f"for this traffic: {per['policy'].removeprefix('policy--')} (best on {objective} for the "
                   f"evaluated {per['workload']} traffic at load {per['load']:g}, distance {per['distance']:.3g})")


@bundle.command()
@click.argument("ref")
@click.option("--logs", type=click.Path(exists=True, path_type=Path), default=None,
              help="A traffic log (OpenAI-format JSON-lines, or a folder of them): the table re-fitted on its "
                   "prompts (predicted figures; shares and costs move with the prompt mix).")
@click.option("--json", "as_json", is_flag=True, help="The table as one JSON object.")
@signature_options
@_TRACKING
def calibrate(ref: str, logs: Path | None, as_json: bool, public_key: Path | None, allow_unsigned: bool,
              tracking_uri: str | None) -> None:
    """The router's calibration table: per λ, expected quality, cost per 1,000 requests and each
    model's share, with intervals (out-of-fold on the training split); what --budget-per-1k,
    --max-share and --min-quality of `predict` choose from."""
    loaded = load_bundle(ref, tracking_uri=tracking_uri, public_key=public_key, allow_unsigned=allow_unsigned)
    try:
        table = loaded.budget_table()
    except KeyError as exc:
        raise click.ClickException(str(exc).strip('"')) from None
    if logs is not None:
        from routeforge.artifacts.deciding.budget import refit  # lazy: numpy on first use

        prompts = logged_prompts(logs)
        if not prompts:
            raise click.ClickException(f"{logs}: no request with a prompt")
        table = refit(table, loaded.router().predict(prompts), f"{logs} ({len(prompts)} prompts, predicted)")
    if as_json:
        click.echo(strict_json.dumps(table))
        return
    models = list(table["rows"][0]["share"]) if table["rows"] else []
    click.echo(f"calibration: {table['source']}, {table['prompts']} prompts"
               + (f", intervals {table['interval']}" if table.get("interval") else ""))
    click.echo(f"{'λ':>10}  {'quality':>8}  {'cost/1k':>10}  " + "  ".join(f"{m[:12]:>12}" for m in models))
    for row in table["rows"]:
        cost = "—" if row["cost_per_1k"] is None else f"{row['cost_per_1k']:.4g}"
        quality = "—" if row["quality"] is None else f"{row['quality']:.4f}"
        click.echo(f"{row['lam']:>10.4g}  {quality:>8}  {cost:>10}  "
                   + "  ".join(f"{row['share'][m]:>12.1%}" for m in models))


@bundle.command()
@click.argument("ref")
@click.option("--logs", required=True, type=click.Path(exists=True, path_type=Path),
              help="A traffic log (JSON lines, or a folder of them) whose requests carry an outcome and the serving "
                   "decision's propensity (`routing.propensity`).")
@click.option("--against", default=None, help="A second bundle (e.g. models:/<name>@champion): the paired difference.")
@click.option("--lam", type=Finite(0.0, 1e12), default=0.0, show_default=True, help="The λ both bundles route with.")
@click.option("--method", type=click.Choice(["dr", "snips", "ips"]), default="dr", show_default=True,
              help="The estimator of the difference.")
@click.option("--level", type=click.Choice(["0.9", "0.95", "0.99"]), default="0.95", show_default=True,
              help="The intervals' confidence level.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@signature_options
@_TRACKING
def replay(ref: str, logs: Path, against: str | None, lam: float, method: str, level: str, as_json: bool,
           public_key: Path | None, allow_unsigned: bool, tracking_uri: str | None) -> None:
    """What REF would have earned on the logged traffic (off-policy: inverse propensity,
    self-normalised, doubly robust), and with --against the difference from that bundle."""
    from collections import Counter

    from routeforge.artifacts.operating.replay import read_logged_decisions  # lazy: numpy on first use
    from routeforge.artifacts.operating.replay import replay as replay_log  # lazy: numpy on first use

    load = lambda r: load_bundle(r, tracking_uri=tracking_uri, public_key=public_key,  # noqa: E731
                                 allow_unsigned=allow_unsigned)
    decisions = read_logged_decisions(logs, progress=lambda n: click.echo(f"{n:,} log lines read", err=True))
    try:
        found = replay_log(load(ref), decisions, lam, load(against) if against else None, method, float(level))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(strict_json.dumps(found.to_json()))
        return
    skipped = sum(found.skipped.values())
    click.echo(f"{found.requests} logged requests replayed ({skipped} lines skipped"
               + "".join(f"; {n} × {r}" + (f" (first: {decisions.first_skipped[r]})" if r in decisions.first_skipped
                                           else "")
                         for r, n in Counter(found.skipped).most_common(3)) + ")")
    for flag in found.flags:
        click.echo(f"FLAGGED: {flag}")
    click.echo(f"logged policy, observed: {found.logged.value:.4f} [{found.logged.low:.4f}, {found.logged.high:.4f}]")
    for side, estimates, agreement in ((found.challenger, found.estimates, found.agreement),
                                       (found.baseline, found.baseline_estimates, found.baseline_agreement)):
        if estimates is None:
            continue
        click.echo(f"{side}: agrees with the served model on {agreement:.1%} of requests")
        for e in estimates.values():
            click.echo(f"  {e.method:>5}: {e.value:.4f} [{e.low:.4f}, {e.high:.4f}]  effective n {e.effective_n:.0f}"
                       + _estimate_flags(e))
    if found.difference is not None:
        d = found.difference
        click.echo(f"difference ({found.challenger} − {found.baseline}, {d.method}): {d.value:+.4f} "
                   f"[{d.low:+.4f}, {d.high:+.4f}] at {d.level:.0%}" + _estimate_flags(d))


@main.group()
def cache() -> None:
    """The local cache of downloaded bundles ($ROUTEFORGE_CACHE, else $ROUTEFORGE_STATE/cache/bundles)."""


@cache.command("list")
def cache_list() -> None:
    """Every cached bundle, most recently used first, with its size."""
    store = BundleCache()
    entries = store.entries()
    for e in entries:
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_used))
        click.echo(f"{e.digest}  {e.bytes / 1e6:9.1f} MB  last used {used}")
    click.echo(f"{len(entries)} bundles, {sum(e.bytes for e in entries) / 1e6:.1f} MB in {store.root}")


@cache.command()
@click.option("--max-bytes", type=click.IntRange(min=0), default=0, show_default=True,
              help="Keep the most recently used bundles up to this many bytes (0: empty the cache).")
def prune(max_bytes: int) -> None:
    """Remove the least recently used bundles beyond --max-bytes."""
    store = BundleCache()
    removed = store.prune(max_bytes)
    components = store.prune_components()
    click.echo(f"removed {len(removed)} bundles, {sum(e.bytes for e in removed) / 1e6:.1f} MB, and {components} "
               "shared components no kept bundle uses")


@main.group()
def keys() -> None:
    """Bundle-signing keys (Ed25519)."""


@keys.command()
@click.argument("private_key", type=click.Path(path_type=Path))
def generate(private_key: Path) -> None:
    """Write a new key pair: PRIVATE_KEY (mode 0600) and PRIVATE_KEY.pub, for `registry.signing_key`
    or $ROUTEFORGE_SIGNING_KEY, which a fleet on object storage must set."""
    if private_key.exists():
        raise click.ClickException(f"{private_key} exists; refusing to overwrite a private key")
    click.echo(f"private key {private_key}\npublic key  {generate_key_pair(private_key)}")


@keys.command()
@click.argument("private_key", type=click.Path(path_type=Path))
@click.option("--retire-public", "retire_public", multiple=True, type=click.Path(exists=True, path_type=Path),
              help="a public key to keep trusting for the versions it signed (a lost key's, from a backup); repeatable")
def rotate(private_key: Path, retire_public: tuple[Path, ...]) -> None:
    """Replace the signing key at PRIVATE_KEY with a new pair. Its public key (and each --retire-public)
    moves to retired/<key id>.pub beside it: versions signed by a retired key are still verified, each
    with the key it names, so the release gate goes on; the old private key is deleted."""
    if not private_key.exists() and not retire_public:
        raise click.ClickException(f"no key at {private_key}: to go on after losing it, name its public half with "
                                   "--retire-public (a backup, or a pinned copy: `routeforge keys list` on a router "
                                   "service), or make a fresh one with `routeforge keys generate`")
    try:
        retired, public = rotate_key(private_key, list(retire_public))
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    kid, pinned, _ = pin(public.read_bytes())
    click.echo(f"retired key ids {', '.join(retired)} (kept in {public.parent / 'retired'}, still pinned)\n"
               f"private key {private_key}\npublic key  {public} (key id {kid}, pinned in {pinned.parent})\n"
               f"router services: pin {public.name} (`routeforge keys pin`) before the first version it signs is "
               "promoted; unpin a retired key once no version it signed is served")


@keys.command("pin")
@click.argument("source")
@_TRACKING
def pin_key(source: str, tracking_uri: str | None) -> None:
    """Pin a public key: SOURCE is a PEM file (from the signer, checked by its id out of band), or a
    models:/ reference whose registry's recorded key is pinned on your word (trust on first use: the
    store's writer chose it; compare the id printed with the signer's)."""
    if source.startswith("models:/"):
        pem = recorded_public_key(source, tracking_uri)
        if pem is None:
            raise click.ClickException(f"{source}: the registry records no public key for this model")
        origin = f"the registry's record for {source} (trust on first use)"
    else:
        path = Path(source)
        if not path.is_file():
            raise click.ClickException(f"{source}: no such file (a PEM public key, or a models:/ reference)")
        pem, origin = path.read_bytes(), str(path)

    try:
        kid, pinned, new = pin(pem)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{'pinned' if new else 'already pinned'}: key {kid} from {origin} in {pinned}")


@keys.command("unpin")
@click.argument("kid")
def unpin_key(kid: str) -> None:
    """Stop trusting pinned key KID (a retired key once no served version is signed by it)."""
    try:
        click.echo(f"unpinned key {kid} ({unpin(kid)})")
    except KeyError as exc:
        raise click.ClickException(str(exc.args[0])) from None


@keys.command("list")
def list_keys() -> None:
    """The pinned keys a bundle is verified with here, and where they were read."""
    keyring = load_keyring(None)
    click.echo(keyring.describe())


if __name__ == "__main__":
    main()
