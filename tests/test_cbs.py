"""Critical batch size: the noise-scale estimator on a problem with known gradient covariance, fits
that recover known constants, steps-to-target, and the trainer's noise-scale and batch-schedule
runs."""

import math

import numpy as np
import pandas as pd
import pytest

from repro.analysis.cbs import (
    bootstrap,
    describe_interval,
    fit_mccandlish,
    fit_targets,
    fit_wsd,
    fit_zhang,
    noise_trajectory,
    pool_size_scaling,
    power_law,
    reach_count,
    reachable_target,
    scaling_laws,
    schedules_vs_fixed,
    steps_to_target,
    target_losses,
)


def test_fits_recover_known_constants():
    batch = np.array([1, 2, 4, 8, 16, 32, 64, 128], float)
    s_min, e_min = 100.0, 3200.0  # B_crit = 32 sequences
    steps = s_min + e_min / batch
    mc = fit_mccandlish(batch, steps)
    assert mc["S_min"] == pytest.approx(s_min, rel=1e-4) and mc["B_crit"] == pytest.approx(
        32, rel=1e-4
    )
    assert np.abs(mc["residuals"]).max() < 1e-6
    zh = fit_zhang(batch, steps)
    assert (zh["a"], zh["b"]) == pytest.approx((s_min, e_min), rel=1e-4)
    assert zh["B_star"] == pytest.approx(1.2 * 1 + 0.2 * 32, rel=1e-4)
    rng = np.random.default_rng(1)
    noisy = steps * np.exp(rng.normal(0, 0.03, len(steps)))
    lo, hi = bootstrap(fit_mccandlish, batch, noisy, "B_crit")
    assert lo < 32 < hi and hi - lo < 32


def test_wsd_fit_recovers_b_opt_and_b_min():
    s_opt, e_min, c = 200.0, 4000.0, 0.05  # B_opt = 20
    s_parabola = np.array([150.0, 200.0, 260.0])
    e_parabola = c * (s_parabola - s_opt) ** 2 + e_min
    s_tail = np.array([800.0, 1000.0])
    e_tail = 6.0 * s_tail + 1500.0  # linear tail: B_min = 6
    s = np.concatenate([[120.0], s_parabola, s_tail])
    e = np.concatenate([[c * (120 - s_opt) ** 2 + e_min + 500], e_parabola, e_tail])
    fit = fit_wsd(e / s, s)
    assert fit["B_opt"] == pytest.approx(e_min / s_opt, rel=1e-6)
    assert fit["B_min"] == pytest.approx(6.0, rel=1e-6)


def test_power_law_recovers_exponent():
    d = np.array([7.5, 15, 30, 60])
    fit = power_law(d, 22.7 * d**0.47)
    assert fit["alpha"] == pytest.approx(0.47) and fit["c"] == pytest.approx(22.7)


def test_steps_to_target_takes_the_best_run_per_batch():
    runs = pd.DataFrame({"run_id": ["a", "b", "c"], "batch_size": [4, 4, 8]})
    evals = pd.DataFrame(
        {
            "run_id": ["a"] * 3 + ["b"] * 3 + ["c"] * 3,
            "step": [10, 20, 30] * 3,
            "tokens": [0] * 9,
            "val_loss": [3.0, 2.5, 2.0, 3.0, 2.2, 2.1, 2.9, 2.8, 2.7],
        }
    )
    table = steps_to_target(runs, evals, [2.4, 1.0], seq_len=16)
    assert table[["batch_size", "steps", "run_id"]].values.tolist() == [[4, 20, "b"]]
    assert table["tokens"].tolist() == [20 * 4 * 16]


def test_interval_beyond_the_limit_reads_unbounded():
    assert describe_interval((6.3, 26.9), 320) == "6.3-26.9"
    assert describe_interval((16.7, 7.3e12), 320) == "16.7-unbounded (above 320)"
    assert describe_interval((math.nan, math.nan), 320) == "not determined"
    assert describe_interval((400.0, math.inf), 320) == "unbounded (above 320)"


def test_bootstrap_keeps_fits_that_never_level_off():
    batch = np.array([1.0, 2, 4, 8, 16, 32])
    lo, hi = bootstrap(
        fit_zhang, batch, 3200 / batch, "B_star"
    )  # S = E/B exactly: a ~ 0, B* ~ infinite
    assert describe_interval((lo, hi), 320).endswith("unbounded (above 320)")
    assert bootstrap(lambda b, s: {"B": math.inf}, batch, 3200 / batch, "B") == (
        math.inf,
        math.inf,
    )  # kept, not dropped
    assert all(
        math.isnan(end) for end in bootstrap(lambda b, s: {"B": math.nan}, batch, 3200 / batch, "B")
    )  # undetermined


# --- the notebook's analyses (targets, fits per target, pool-size scaling, schedules) ------------


def _hyperbola_sweep(s_min, e_min, batches=(1, 2, 4, 8, 16, 32, 64), pool="p"):
    """Runs whose val loss 1 + S(B) / step reaches 2.0 exactly at step S(B) = s_min + e_min / B,
    evaluated at every step up to 2 S(B)."""
    runs, evals = [], []
    for b in batches:
        rid, s_b = f"{pool}-{b}", s_min + e_min / b
        runs.append({"run_id": rid, "batch_size": b, "pool": pool})
        for step in range(1, int(2 * s_b) + 1):
            evals.append(
                {"run_id": rid, "step": step, "tokens": step * b, "val_loss": 1 + s_b / step}
            )
    return pd.DataFrame(runs), pd.DataFrame(evals)


def test_reach_count_is_two_thirds_and_at_least_three():
    assert reach_count(2) == 3 and reach_count(6) == 4 and reach_count(9) == 6


def test_target_losses_span_from_the_reachable_loss_towards_the_first_evaluation():
    runs, evals = _hyperbola_sweep(10, 160)
    targets = target_losses(runs, evals, 3)
    hardest = reachable_target(runs, evals, 3)
    first = evals.groupby("run_id")["val_loss"].first().min()
    assert targets[0] == hardest and len(targets) == 3
    assert targets[-1] == round(hardest + 0.6 * (first - hardest), 3)


def test_fit_targets_recovers_b_crit_and_skips_targets_with_few_batches():
    runs, evals = _hyperbola_sweep(10, 160)  # B_crit = 16 sequences
    reach = steps_to_target(runs, evals, [2.0])
    only_two = reach[reach["batch_size"] <= 2].assign(target=3.0)
    fits, mc = fit_targets(pd.concat([reach, only_two]), limit=640)
    assert fits["target"].tolist() == [2.0] and list(mc) == [2.0]
    row = fits.iloc[0]
    assert row["B_crit (McCandlish)"] == pytest.approx(16, rel=0.1)
    assert row["batch sizes"] == 7 and row["max |log residual|"] < 0.05
    assert "-" in row["B_crit 90% CI"] or "unbounded" in row["B_crit 90% CI"]


def test_noise_trajectory_orders_by_batch_then_tokens():
    runs = pd.DataFrame({"run_id": ["a", "b"], "batch_size": [32, 8]})
    evals = pd.DataFrame(
        {
            "run_id": ["a", "b", "b"],
            "epoch": [1.0, 2.0, 1.0],
            "tokens": [100, 200, 100],
            "val_loss": [3.0, 2.0, 2.5],
            "b_simple": [1.0, 4.0, 2.0],
        }
    )
    out = noise_trajectory(runs, evals)
    assert out["batch_size"].tolist() == [8, 8, 32] and out["b_simple"].tolist() == [2.0, 4.0, 1.0]


def test_pool_size_scaling_fits_each_pool_with_intervals_and_a_power_law():
    parts = [_hyperbola_sweep(10, 40 * k, pool=f"p{k}") for k in (1, 2, 4)]  # B_crit 4, 8, 16
    runs = pd.concat([p[0] for p in parts], ignore_index=True)
    evals = pd.concat([p[1] for p in parts], ignore_index=True)
    tokens = {"p1": 1_000_000, "p2": 2_000_000, "p4": 4_000_000}
    scaling = pool_size_scaling(runs, evals, tokens, n_batches=7, seq_len=1)
    assert scaling["pool tokens"].tolist() == [1_000_000, 2_000_000, 4_000_000]
    assert scaling["B_crit"].is_monotonic_increasing
    assert (scaling["B_crit lo"] <= scaling["B_crit"]).all()
    assert (scaling["B_crit"] <= scaling["B_crit hi"]).all()
    law = scaling_laws(scaling)
    assert law["B_crit"]["alpha"] == pytest.approx(1.0, abs=0.15)
    assert scaling_laws(scaling.assign(**{"B*": [1.0, np.nan, 2.0]})) == {}


def test_pool_size_scaling_without_three_batches_gives_no_fit():
    runs, evals = _hyperbola_sweep(10, 40, batches=(1, 2))
    scaling = pool_size_scaling(runs, evals, {"p": 1000}, n_batches=3, seq_len=1)
    assert np.isnan(scaling.loc[0, "B_crit"]) and np.isnan(scaling.loc[0, "B*"])


def test_schedules_vs_fixed_puts_the_best_fixed_run_first():
    runs = pd.DataFrame(
        {
            "run_id": ["f1", "f2"],
            "batch_size": [2, 8],
            "best_val_loss": [2.5, 2.4],
            "lr": [1e-3, 3e-3],
            "best_epoch": [4.0, 5.0],
        }
    )
    schedule_runs = pd.DataFrame(
        {
            "run_id": ["s1", "s2", "s3"],
            "batch_schedule": ["0:2,0.5:8", "0:2,0.5:8", "0:8,0.5:2"],
            "best_val_loss": [2.6, 2.3, 2.7],
            "lr": [1e-3, 3e-3, 1e-3],
            "best_epoch": [6.0, 7.0, 8.0],
        }
    )
    evals = pd.DataFrame({"run_id": ["f2", "f1"], "tokens": [10, 10], "val_loss": [2.4, 2.5]})
    schedule_evals = pd.DataFrame({"run_id": ["s2", "s3"], "tokens": [10, 10], "val_loss": [1, 2]})
    schedules = {"ramp-up": "0:2,0.5:8", "ramp-down": "0:8,0.5:2"}
    table, curves = schedules_vs_fixed(runs, evals, schedule_runs, schedule_evals, schedules)
    assert table["policy"].tolist() == [
        "fixed batch 8",
        "ramp-up (0:2,0.5:8)",
        "ramp-down (0:8,0.5:2)",
    ]
    assert table["best val loss"].tolist() == [2.4, 2.3, 2.7]
    assert curves["ramp-up (0:2,0.5:8)"]["run_id"].tolist() == ["s2"]
