"""A challenger judged on the traffic the fleet really served, before it serves any.

The traffic log (`prompts/traffic_logs.py` documents a line) holds, per request, the prompt, the
model that served it, what production said of the answer (`outcome`, in [0, 1]) and, where the
serving router logged it, the probability it had of choosing that model (`routing.propensity`:
`Router.choose(..., with_propensity=True)` or `RouterBundle.route(..., with_propensity=True)`).
From those, `replay` estimates the mean outcome the challenger bundle would have had on the same
requests (`artifacts.operating.off_policy`: inverse propensity, self-normalised, and doubly robust with the
challenger's own quality estimates), and, given a second bundle (the champion), the paired
difference between them with its interval: what the release gate's `release.replay` holds on.

The challenger routes as `RouterBundle.route` does at `lam` (deterministic: all its probability on
the model it picks). A logged request whose served model the challenger does not have counts with
weight 0 (it would never have served it), not as a skipped line: leaving such requests out would
judge the challenger only where it could have agreed.

Only lines with both an outcome and a propensity are usable; the others are counted by reason
(`skipped`). The estimates are unbiased only if the propensities are the serving rule's true ones
and positive wherever the challenger puts its choice: a deterministic champion logs propensity 1
and supports no counterfactual (the challenger is then judged on the requests where it agrees);
serve with Thompson sampling or ε-exploration (`explore=`) to give every model a chance.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from routeforge.artifacts.common.json_lines import LineError, strict_json
from routeforge.artifacts.operating.off_policy import METHODS, Estimate, difference, estimate, observed_mean
from routeforge.artifacts.operating.traffic_prompts import (
    LineTooLong,
    LogLineError,
    log_lines,
    outcome_of,
    prompt_text,
    propensity_of,
    served_model,
)


@dataclass
class LoggedDecisions:
    """The usable lines of a traffic log: prompt, served model, propensity and outcome per request."""

    texts: list[str] = field(default_factory=list)
    served: list[str] = field(default_factory=list)
    propensity: list[float] = field(default_factory=list)
    outcome: list[float] = field(default_factory=list)
    rows: list[str] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)  # reason -> lines
    first_skipped: dict[str, str] = field(default_factory=dict)  # reason -> the first row id it hit
    flags: list[str] = field(default_factory=list)  # what `cap_shares` capped, said with the estimate

    def __len__(self) -> int:
        return len(self.texts)

    def skip(self, row: str, reason: str) -> None:
        self.skipped[reason] += 1
        self.first_skipped.setdefault(reason, row)


REPEAT = "a repeat of an earlier request (same id or time, prompt, model and outcome: counted once)"


def read_logged_decisions(path: Path, limit: int = 1_000_000, progress=None,
                          every: int = 100_000) -> LoggedDecisions:
    """The requests of the log at `path` (a file, or a folder of *.jsonl / *.jsonl.gz) that carry an
    outcome and a propensity, at most `limit`; every other line is counted by reason.

    Lines are read as the pipeline reads them (`artifacts.common.json_lines.strict_json`: invalid UTF-8,
    NaN, a nesting bomb or a lone surrogate is one skipped line, never the end of the replay), as a
    stream with bounded memory per line (`traffic_prompts.MAX_LINE_BYTES`); a line repeated exactly
    counts once (10^6 copies of one request are one request, not a million-fold weight); `progress`
    is called with the lines read every `every` lines."""
    out = LoggedDecisions()
    seen: set[bytes] = set()  # each request's identity
    lines: set[bytes] = set()  # each line's bytes
    for number, (row, line) in enumerate(log_lines(path), start=1):
        if progress is not None and number % every == 0:
            progress(number)
        if isinstance(line, LineTooLong):
            out.skip(row, line.reason)
            continue
        exact = hashlib.blake2b(line, digest_size=16).digest()  # an exact repeat is skipped before parsing
        if exact in lines:
            out.skip(row, REPEAT)
            continue
        lines.add(exact)
        try:
            rec = strict_json(line)
            if not isinstance(rec, dict) or not isinstance(rec.get("request"), dict):
                raise LogLineError("field 'request' missing or not an object")
            text, model = prompt_text(rec["request"]), served_model(rec)
            outcome, propensity = outcome_of(rec), propensity_of(rec)
        except (LogLineError, LineError, ValueError) as exc:
            out.skip(row, str(exc))
            continue
        # a repeat is the same request, not the same bytes: an extra field per line (a nonce) made
        # 5,000 copies of one request 5,000 requests
        identity = json.dumps([_request_id(rec), text, model, propensity, outcome], default=str)
        digest = hashlib.blake2b(identity.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        if digest in seen:
            out.skip(row, REPEAT)
            continue
        seen.add(digest)
        if outcome is None:
            out.skip(row, "no outcome (field 'outcome')")
        elif propensity is None:
            out.skip(row, "no propensity (field 'routing.propensity')")
        else:
            out.texts.append(text)
            out.served.append(model)
            out.propensity.append(propensity)
            out.outcome.append(outcome)
            out.rows.append(row)
            if len(out) >= limit:
                break
    return out


def _request_id(rec: dict[str, Any]) -> Any:
    """What names a logged request: its id where the gateway wrote one, else its time."""
    for where in (rec, rec.get("request"), rec.get("response")):
        if isinstance(where, dict) and isinstance(where.get("id"), (str, int)):
            return where["id"]
    return rec.get("timestamp")


MAX_PROMPT_SHARE = 0.05  # of the estimate's importance weight, any one prompt
MAX_BAND_SHARE = 0.9  # of the estimate's importance weight, the lines of any one decade of propensity


def cap_shares(decisions: LoggedDecisions, max_prompt_share: float = MAX_PROMPT_SHARE,
               max_band_share: float = MAX_BAND_SHARE) -> LoggedDecisions:
    """Thin the lines that would let one writer steer the estimate, and flag it: no prompt keeps more
    than `max_prompt_share` of the total importance weight (Σ 1/propensity), and no decade of
    propensity (0.1-1, 0.01-0.1, …) more than `max_band_share`. Lines are kept in log order up to
    their cap; the rest are skipped with the reason, and `flags` says what was capped. Why weight,
    not lines: 5,000 lines of one prompt at propensity 0.01 weigh as 500,000 lines at 1 (they moved
    SNIPS from 0.54 to 0.9997). A log with too few distinct prompts for the cap is flagged, not
    thinned. The caps bias the estimate only where they act, which the flags say."""
    decisions = replace(decisions, skipped=Counter(decisions.skipped), first_skipped=dict(decisions.first_skipped),
                        flags=list(decisions.flags))  # the caller's stays as it read it
    weights = 1.0 / np.asarray(decisions.propensity, dtype=float) if len(decisions) else np.zeros(0)
    keep = np.ones(len(decisions), dtype=bool)
    by_prompt: dict[str, list[int]] = {}
    for i, text in enumerate(decisions.texts):
        by_prompt.setdefault(text, []).append(i)
    if len(by_prompt) * max_prompt_share < 1:
        if len(decisions):
            decisions.flags.append(f"{len(by_prompt)} distinct prompts: too few for each to hold at most "
                                   f"{max_prompt_share:.0%} of the estimate; no prompt was capped")
    else:
        cap = _water_level([float(weights[rows].sum()) for rows in by_prompt.values()], max_prompt_share)
        for text, rows in by_prompt.items():
            dropped = _thin(rows, weights, cap, keep)
            if dropped:
                decisions.flags.append(f"prompt {text[:60]!r}: {dropped} of its {len(rows)} lines left out, so it "
                                       f"holds at most {max_prompt_share:.0%} of the estimate's weight")
    bands: dict[int, list[int]] = {}
    for i in np.flatnonzero(keep):
        bands.setdefault(int(np.floor(-np.log10(decisions.propensity[i]) + 1e-12)), []).append(int(i))
    if len(bands) > 1:
        cap = _water_level([float(weights[rows].sum()) for rows in bands.values()], max_band_share)
        for band, rows in sorted(bands.items()):
            dropped = _thin(rows, weights, cap, keep)
            if dropped:
                decisions.flags.append(f"propensities {10.0 ** -(band + 1):g} to {10.0 ** -band:g}: {dropped} of "
                                       f"{len(rows)} lines left out, so they hold at most {max_band_share:.0%} of "
                                       "the estimate's weight")
    if keep.all():
        return decisions
    reason = "left out by the share caps (flags say which)"
    for i in np.flatnonzero(~keep):
        decisions.skip(decisions.rows[i], reason)
    kept = np.flatnonzero(keep)
    return replace(decisions, texts=[decisions.texts[i] for i in kept], served=[decisions.served[i] for i in kept],
                   propensity=[decisions.propensity[i] for i in kept], outcome=[decisions.outcome[i] for i in kept],
                   rows=[decisions.rows[i] for i in kept])


def _water_level(totals: list[float], share: float) -> float:
    """The cap C with which Σ min(total, C) puts no group above `share` of the capped whole."""
    ordered = sorted(totals, reverse=True)
    rest = sum(ordered)
    for k, top in enumerate(ordered):
        if 1 - share * k <= 0:
            break
        level = share * rest / (1 - share * k)
        if top <= level:
            return level
        rest -= top
    return float("inf")


def _thin(rows: list[int], weights: np.ndarray, cap: float, keep: np.ndarray) -> int:
    """Keep `rows` in order while their weight stays within `cap` (a line heavier than the cap alone is
    left out too); returns how many were left out."""
    total, dropped = 0.0, 0
    for i in rows:
        if total + weights[i] > cap * (1 + 1e-9):
            keep[i] = False
            dropped += 1
        else:
            total += weights[i]
    return dropped


@dataclass(frozen=True)
class PolicyOnLog:
    """One bundle's routing of the logged prompts over the log's action space."""

    probabilities: np.ndarray  # (n, actions) one-hot on the bundle's choice
    q_hat: np.ndarray  # (n, actions) its quality estimates (0 for a model it lacks)
    agreement: float  # share of logged requests where it picks the served model


def policy_on_log(bundle, decisions: LoggedDecisions, actions: list[str], lam: float = 0.0) -> PolicyOnLog:
    """How `bundle` (a `RouterBundle`) routes the logged prompts, as probabilities and estimates
    over `actions` (every model either side or the log names)."""
    distinct = list(dict.fromkeys(decisions.texts))  # each distinct prompt encoded and routed once
    where = {text: j for j, text in enumerate(distinct)}
    rows = np.array([where[text] for text in decisions.texts], dtype=int)
    routing = bundle.route(distinct, lam)
    choice = [routing.choice[j] for j in rows]
    index = {m: j for j, m in enumerate(actions)}
    n = len(decisions)
    probabilities = np.zeros((n, len(actions)))
    probabilities[np.arange(n), [index[m] for m in choice]] = 1.0
    quality = np.asarray(routing.prediction.quality, dtype=np.float64)[rows] if n else np.zeros((0, 0))
    # an unknown estimate (NaN) counts as the model's mean estimate, else 0: DR needs a number
    finite = np.isfinite(quality)
    means = np.where(finite, quality, 0.0).sum(axis=0) / np.maximum(finite.sum(axis=0), 1)
    q_hat = np.zeros((n, len(actions)))
    for j, model in enumerate(routing.prediction.models):
        q_hat[:, index[model]] = np.where(np.isfinite(quality[:, j]), quality[:, j], means[j])
    agreement = float(np.mean([c == s for c, s in zip(choice, decisions.served)])) if n else float("nan")
    return PolicyOnLog(probabilities, q_hat, agreement)


@dataclass(frozen=True)
class Replay:
    """`replay`'s answer: the challenger's estimated mean outcome on the logged traffic by each
    estimator, the logged policy's observed mean, and against a baseline bundle the paired
    difference (challenger − baseline) by `method`."""

    challenger: str
    requests: int
    estimates: dict[str, Estimate]
    logged: Estimate  # the observed mean outcome of what was served
    agreement: float
    skipped: dict[str, int]
    flags: list[str] = field(default_factory=list)  # what the share caps left out (`cap_shares`)
    baseline: str | None = None
    baseline_estimates: dict[str, Estimate] | None = None
    baseline_agreement: float | None = None
    difference: Estimate | None = None
    method: str = "dr"

    def to_json(self) -> dict[str, Any]:
        def est(e: Estimate | None) -> dict[str, Any] | None:
            return None if e is None else asdict(e)
        return {"challenger": self.challenger, "requests": self.requests, "method": self.method,
                "estimates": {k: est(v) for k, v in self.estimates.items()}, "logged": est(self.logged),
                "agreement": self.agreement, "skipped": dict(self.skipped), "flags": list(self.flags),
                "baseline": self.baseline,
                "baseline_estimates": ({k: est(v) for k, v in self.baseline_estimates.items()}
                                       if self.baseline_estimates else None),
                "baseline_agreement": self.baseline_agreement, "difference": est(self.difference)}


def replay(challenger, decisions: LoggedDecisions, lam: float = 0.0, baseline=None, method: str = "dr",
           level: float = 0.95, share_caps: bool = True) -> Replay:
    """Estimate `challenger`'s (a `RouterBundle`) mean outcome on the logged requests and, with
    `baseline` (another bundle, e.g. the champion), the paired difference by `method`."""
    if method not in METHODS:
        raise ValueError(f"method {method!r}: one of {', '.join(METHODS)}")
    if share_caps:  # off only to measure what the caps change (benchmarks/replay_scale.py)
        decisions = cap_shares(decisions)
    if len(decisions) < 2:
        reasons = "; ".join(f"{n} × {r}" for r, n in decisions.skipped.most_common(3)) or "the log is empty"
        raise ValueError(f"replay needs at least 2 logged requests with an outcome and a propensity, found "
                         f"{len(decisions)} ({reasons})")
    bundles = [challenger] + ([baseline] if baseline is not None else [])
    actions = sorted({*decisions.served, *(m for b in bundles for m in b.models)})
    index = {m: j for j, m in enumerate(actions)}
    logged = np.array([index[m] for m in decisions.served])
    propensity, outcome = np.asarray(decisions.propensity), np.asarray(decisions.outcome)
    mine = policy_on_log(challenger, decisions, actions, lam)
    estimates = estimate(logged, propensity, outcome, mine.probabilities, mine.q_hat, level)
    report = Replay(challenger.manifest.name, len(decisions), estimates, observed_mean(outcome, level),
                    mine.agreement, dict(decisions.skipped), list(decisions.flags), method=method)
    if baseline is None:
        return report
    theirs = policy_on_log(baseline, decisions, actions, lam)
    return replace(report, baseline=baseline.manifest.name,
                   baseline_estimates=estimate(logged, propensity, outcome, theirs.probabilities, theirs.q_hat, level),
                   baseline_agreement=theirs.agreement,
                   difference=difference(logged, propensity, outcome, mine.probabilities, theirs.probabilities,
                                         mine.q_hat, theirs.q_hat, method, level))
