"""A tier's fitted step model judged before anything trusts it: the simulator, the policies and the
dispatch call take its prefill and decode terms as given, so a fit that explains little of what was
measured (low R²) or has a negative intercept (time that is not there) is said at once, in the
stage's log and metadata, rather than found later in odd routing."""

from __future__ import annotations

from collections.abc import Mapping

R2_FLOOR = 0.5  # below this the line explains less than half of the measured variance
INTERCEPTS = ("prefill_intercept_s", "decode_w_s", "decode_d_s", "ttft_p_s")


def fit_warnings(tier: str, fit: Mapping[str, float]) -> list[str]:
    """One line per problem of `fit` (a batch fit or an imported prior): each R² below `R2_FLOOR`,
    each negative intercept."""
    out = []
    for key, value in sorted(fit.items()):
        if not isinstance(value, (int, float)):
            continue
        if key.endswith("r2") and value < R2_FLOOR:
            out.append(f"{tier}: {key} {value:.3f} is below {R2_FLOOR}: the fitted line explains little of "
                       "the measurements (too few or too noisy points; profile longer or with more batch sizes)")
        elif key in INTERCEPTS and value < 0:
            out.append(f"{tier}: {key} {value:.3g} s is negative: the fit extrapolates below zero at small "
                       "sizes (the simulator floors it)")
    return out
