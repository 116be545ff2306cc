"""Latency heads from the physics up: the line, line + monotone residual trees, trees; the choice
between them by grouped cross-validation; conformal SLO intervals; the runtime reading them back."""

import json

import numpy as np
import pytest
from routeforge.artifacts.deciding.latency import Head, LatencyModel, LinearTerms
from routeforge.profiling.batch_fits import BatchMeasurement
from routeforge.profiling.head_models import (
    HeadRecipe,
    bounded_least_squares,
    choose_by_groups,
    fit_line,
    group_folds,
    relative_error_quantiles,
)
from routeforge.profiling.latency_heads import FEATURES, features, serve, write_batch_heads


def _batches(seed=0, extra_per_sequence=0.0):
    """Static batches whose decode time is W + H·context + a per-sequence cost that bends upward
    past 8 sequences (what a line misses and trees can learn), 2 repeats per configuration."""
    rng = np.random.default_rng(seed)
    out = []
    for b in (1, 2, 4, 8, 16, 32):
        for p in (128, 512, 2048):
            for _ in range(2):
                ctx = b * (p + 64)
                tpot = (0.02 + 2e-7 * ctx + 1e-4 * b + extra_per_sequence * max(b - 8, 0) ** 1.5) * rng.uniform(0.99, 1.01)
                ttft = (0.01 + 2e-5 * b * p) * rng.uniform(0.99, 1.01)
                out.append(BatchMeasurement(b, p, 128, ttft, tpot, ttft + 127 * tpot, 128))
    return out


def test_bounded_least_squares_keeps_slopes_non_negative_and_leaves_out_a_gross_outlier():
    x = np.arange(1.0, 21.0)
    y = 0.5 + 0.1 * x - 0.001 * x**2  # bends down: unbounded, the x² term would take a negative slope
    y[7] = 40.0  # one wild point
    design = np.column_stack([np.ones_like(x), x, x**2])
    coef, kept = bounded_least_squares(design, y, free=[True, False, False])
    assert coef[2] == pytest.approx(0.0, abs=1e-9) and coef[1] > 0
    assert not kept[7] and kept.sum() == 19
    unbounded, *_ = np.linalg.lstsq(design[kept], y[kept], rcond=None)
    assert unbounded[2] == pytest.approx(-0.001, rel=1e-6)


def test_a_line_fills_missing_features_with_the_training_median():
    x = np.array([[1.0, 10.0], [2.0, np.nan], [3.0, 30.0], [4.0, 40.0]])
    line = fit_line(x, 2 * x[:, 0] + 1, ("a", "b"), ((), ("a",)))
    assert line.fill == {"a": 2.5}
    assert line.predict(np.array([[np.nan, 5.0]]), ("a", "b"))[0] == pytest.approx(6.0)
    back = LinearTerms.from_json(json.loads(json.dumps(line.to_json())))
    assert back == line


def test_group_folds_keep_each_configuration_whole():
    groups = [g for g in "abcdefg" for _ in range(3)]
    fold = group_folds(groups, 5, seed=1)
    assert all(len({f for f, g2 in zip(fold, groups) if g2 == g}) == 1 for g in set(groups))
    assert set(fold) == set(range(5))
    assert set(group_folds(["x", "y"], 5)) == {0, 1}  # fewer groups than folds: one each


def test_held_out_edge_configurations_are_served_by_the_line_not_by_trees():
    ms = _batches()
    x = features(ms)
    y = np.array([m.decode_iter_s for m in ms])
    recipe = HeadRecipe(FEATURES, ((), ("mean_context_tokens",), ("batch_size",)), ("batch_size",))
    edge = np.array([m.batch_size == 32 and m.prompt_tokens == 2048 for m in ms])
    errors = {k: float(np.abs(recipe.fit(k, x[~edge], y[~edge]).predict(x[edge], FEATURES) - y[edge]).mean())
              for k in ("line", "residual", "trees")}
    # the largest batch with the longest prompt is beyond every training cell: trees predict a
    # neighbour's time, the line keeps its slope
    assert errors["line"] < 0.2 * errors["trees"] and errors["residual"] < 0.5 * errors["trees"]
    choice = choose_by_groups(recipe, x, y, [(m.batch_size, m.prompt_tokens) for m in ms])
    assert choice.kind in ("line", "residual") and choice.cv_mae[choice.kind] < choice.cv_mae["trees"]
    record = choice.record()
    assert record["chosen"] == choice.kind and record["why"].startswith(f"{choice.kind}: ")
    assert set(record["standard_error_ms"]) == set(recipe.candidates)


def test_the_lowest_error_serves_with_its_standard_error_on_record():
    from routeforge.profiling.head_models import Choice

    choice = Choice.lowest({"line": np.array([1.0, 0.95, 1.0]), "trees": np.array([1.0, 0.9, 1.0])})
    assert choice.kind == "trees" and choice.record()["why"].startswith("trees: lowest held-out MAE")
    assert choice.record()["standard_error_ms"]["trees"] == pytest.approx(1e3 * np.std([1, 0.9, 1], ddof=1) / 3**0.5)
    assert Choice.lowest({"line": np.array([1.0]), "trees": np.array([1.0])}).kind == "line"  # a tie: the simpler


def test_residual_trees_learn_what_the_line_misses_and_never_fall_as_the_batch_grows():
    ms = _batches(extra_per_sequence=2e-4)
    x = features(ms)
    y = np.array([m.decode_iter_s for m in ms])
    recipe = HeadRecipe(FEATURES, ((), ("mean_context_tokens",), ("batch_size",)), ("batch_size",))
    inside = np.array([m.batch_size == 16 for m in ms])  # held out, with batches on both sides in training
    errors = {k: float(np.abs(recipe.fit(k, x[~inside], y[~inside]).predict(x[inside], FEATURES) - y[inside]).mean())
              for k in ("line", "residual")}
    assert errors["residual"] < 0.8 * errors["line"]  # the bend past 8 sequences is learned
    head = recipe.fit("residual", x, y)
    trees_only = Head("residual", LinearTerms(head.line.terms, (0.0,) * len(head.line.terms), head.line.fill),
                      head.booster)
    for p in (128, 512, 2048):
        grid = np.array([[b, p, 128, b * p, b * (p + 64)] for b in range(1, 40)], dtype=float)
        # the trees alone are monotone in batch size, so line (slopes ≥ 0) + trees is too
        step = grid.copy()
        step[:, 3:] = grid[0, 3:]  # hold the token features fixed: only the batch size moves
        assert (np.diff(trees_only.predict(step, FEATURES)) >= -1e-9).all()


def test_conformal_quantile_covers_every_group_not_only_the_pool():
    rng = np.random.default_rng(0)
    predicted = np.ones(400)
    noise = np.r_[rng.normal(0, 0.01, 300), rng.normal(0, 0.2, 100)]  # one load level is much noisier
    groups = np.r_[np.zeros(300), np.ones(100)]
    pooled = relative_error_quantiles(predicted + noise, predicted, (0.95,))["0.95"]
    per_group = relative_error_quantiles(predicted + noise, predicted, (0.95,), groups=groups)["0.95"]
    noisy = groups == 1
    assert (noise[noisy] <= pooled).mean() < 0.93 <= (noise[noisy] <= per_group).mean()
    # finite-sample: with 19 errors the 0.95 quantile is the largest, not an interpolation below it
    assert relative_error_quantiles(np.arange(1.0, 20.0) + 1, np.ones(19), (0.95,))["0.95"] == 19.0


def test_served_heads_are_written_chosen_bounded_and_reproduced_by_the_loader(tmp_path):
    ms = _batches(extra_per_sequence=2e-4)
    spec = write_batch_heads(ms, tmp_path / "heads", "synthetic@cpu")
    assert spec["format"] == 2 and set(spec["heads"]) == {"tpot", "ttft"}
    for target, head in spec["heads"].items():
        chosen, mae = head["selection"]["chosen"], head["selection"]["cv_mae_ms"]
        assert chosen == min(mae, key=mae.get)
        assert head["kind"] == ("line" if chosen == "classic_line" else chosen)
        assert (tmp_path / "heads" / f"{target}.json").exists() == (head["kind"] != "line")
    held = spec["evaluation"]["held_out"]
    assert held["tpot_mae_ms_served"] < held["kinds"]["trees"]["tpot_mae_ms"]
    assert set(held["coverage_p95_by_batch"]["e2e"]) == {"1", "2", "4", "8", "16", "32"}
    loaded = LatencyModel.load(tmp_path / "heads")
    assert loaded.golden_max_abs_diff() == 0.0
    x = features(ms)
    again = serve(ms)
    assert np.array_equal(loaded.predict_matrix(x)["tpot"], again.heads["tpot"].predict(x, FEATURES))
    got = loaded.predict_matrix(x)
    q = spec["intervals"]["e2e"]["quantiles"]["0.95"]
    assert np.allclose(loaded.slo_bound("e2e", got["e2e"]), got["e2e"] * (1 + q))
    assert loaded.within_range(x).all()
    beyond = loaded.matrix([{"batch_size": 64, "prompt_tokens": 512, "output_tokens": 128,
                             "prefill_tokens": 64 * 512, "mean_context_tokens": 64 * 576}])
    assert not loaded.within_range(beyond)[0]  # 64 sequences were never profiled


def test_format_1_heads_load_as_trees_and_a_malformed_head_is_refused(tmp_path):
    from routeforge.profiling.head_models import train_trees

    ms = _batches()

    x, y = features(ms), np.array([m.decode_iter_s for m in ms])
    folder = tmp_path / "v1"
    folder.mkdir()
    booster = train_trees(x, y, FEATURES)
    booster.save_model(str(folder / "tpot.json"))
    booster.save_model(str(folder / "ttft.json"))
    legacy = {"tier": "t", "kind": "batch", "features": list(FEATURES), "length_feature": "output_tokens",
              "targets": {"tpot": "tpot.json", "ttft": "ttft.json"}, "prior": {"ttft_s": 0.01, "tpot_s": 0.02},
              "residual_quantiles": {"tpot": {"0.95": 0.001}}}
    (folder / "heads.json").write_text(json.dumps(legacy))
    model = LatencyModel.load(folder)
    assert {h.kind for h in model.heads.values()} == {"trees"}
    assert np.allclose(model.predict_matrix(x)["tpot"], booster.predict(__import__("xgboost").DMatrix(
        x, feature_names=list(FEATURES))))
    assert model.slo_bound("tpot", np.array([0.02]))[0] == pytest.approx(0.021)  # format 1: absolute residuals
    with pytest.raises(ValueError, match="a line head needs a line and no trees"):
        Head("line", None, None)
    with pytest.raises(ValueError, match="not one of"):
        Head("spline")
