"""Critical batch size: fits that recover known constants, steps-to-target, the notebook's
analyses, and every claim of notebook 05 on hand-made data in all three directions (agrees,
disagrees, undetermined)."""

import math

import numpy as np
import pandas as pd
import pytest

from repro.analysis.cbs import (
    RESIDUAL_TOLERANCE,
    ScheduleComparison,
    b_simple_near,
    bootstrap,
    cbs_claims,
    describe_interval,
    fit_mccandlish,
    fit_targets,
    fit_wsd,
    fit_zhang,
    noise_growth,
    noise_trajectory,
    pool_size_scaling,
    power_law,
    reach_count,
    reachable_target,
    resolution_miss,
    scaling_laws,
    schedule_slice,
    schedules_vs_fixed,
    steps_to_target,
    target_losses,
)
from repro.analysis.intervals import Difference
from repro.analysis.results import Results, memory_documents
from repro.errors import ReproError


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
    assert table[["batch_size", "steps", "previous step", "run_id"]].values.tolist() == [
        [4, 20, 10, "b"]
    ]
    crossing = 10 * 2**0.75  # 3.0 at step 10, 2.2 at step 20: 2.4 is 3/4 of the way in log(step)
    assert table["crossing step"].tolist() == pytest.approx([crossing])
    assert table["tokens"].tolist() == pytest.approx([crossing * 4 * 16])


def test_steps_to_target_interpolates_inside_the_evaluation_interval():
    """Batches 4 and 8 both first reach 2.0 at their evaluation of step 40 (after step 20); in
    log(step) batch 4 (2.5 -> 1.5) crosses half way, batch 8 (2.2 -> 1.4) a quarter of the way.
    Of batch 4's two runs, the one listed second crosses first."""
    runs = pd.DataFrame({"run_id": ["a", "b", "c"], "batch_size": [4, 4, 8]})
    evals = pd.DataFrame(
        {
            "run_id": ["a"] * 3 + ["b"] * 3 + ["c"] * 3,
            "step": [10, 20, 40] * 3,
            "tokens": [0] * 9,
            "val_loss": [3.0, 2.9, 1.9, 3.0, 2.5, 1.5, 3.0, 2.2, 1.4],
        }
    )
    table = steps_to_target(runs, evals, [2.0], seq_len=16)
    assert table[["batch_size", "steps", "previous step", "run_id"]].values.tolist() == [
        [4, 40, 20, "b"],
        [8, 40, 20, "c"],
    ]
    crossings = [20 * 2**0.5, 20 * 2**0.25]  # 28.28 and 23.78 steps
    assert table["crossing step"].tolist() == pytest.approx(crossings)
    assert table["sequences"].tolist() == pytest.approx([crossings[0] * 4, crossings[1] * 8])
    assert not table["left-censored"].any()


def test_steps_to_target_at_the_first_evaluation_is_left_censored():
    runs = pd.DataFrame({"run_id": ["a", "b"], "batch_size": [2, 4]})
    evals = pd.DataFrame(
        {
            "run_id": ["a", "a", "b", "b"],
            "step": [50, 100, 25, 50],
            "tokens": [100, 200, 100, 200],
            "val_loss": [1.9, 1.5, 2.5, 1.5],
        }
    )
    table = steps_to_target(runs, evals, [2.0])
    assert table[["steps", "previous step", "left-censored"]].values.tolist() == [
        [50, 0, True],
        [50, 25, False],
    ]
    assert table["crossing step"].tolist() == pytest.approx([50, 25 * 2**0.5])
    assert table["tokens"].tolist() == pytest.approx([100, 4 * 25 * 2**0.5])  # tokens per step


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


def _trajectory(b_simple, losses=None, batch=8) -> pd.DataFrame:
    """A noise-scale run's evaluations: B_simple and val loss (default: falling) per evaluation."""
    n = len(b_simple)
    losses = np.linspace(3.0, 2.0, n) if losses is None else losses
    return pd.DataFrame(
        {
            "batch_size": batch,
            "epoch": np.arange(1, n + 1) / 4,
            "tokens": np.arange(1, n + 1) * 1000,
            "val_loss": losses,
            "b_simple": b_simple,
        }
    )


EMPTY_TRAJECTORY = _trajectory([])
NO_FITS = pd.DataFrame()
NO_SCHEDULES = ScheduleComparison(
    pd.DataFrame(), {}, Difference(np.nan, -np.inf, np.inf), "best schedule - best fixed batch"
)
SCALING = pd.DataFrame(
    {"pool tokens": [1_000_000, 2_000_000, 4_000_000], "B*": [4, 6, 9], "largest batch": 16}
)
VERDICTS = {"agrees", "disagrees", "undetermined"}


def _claims(
    trajectory=EMPTY_TRAJECTORY,
    fits=NO_FITS,
    law=None,
    schedules=NO_SCHEDULES,
    lr_schedule="cosine",
    scaling=SCALING,
) -> pd.DataFrame:
    claims = cbs_claims(trajectory, fits, scaling, law or {}, schedules, lr_schedule, "tiny")
    assert set(claims["agrees?"]) <= VERDICTS
    assert claims["measured here"].str.startswith("model tiny").all()
    return claims.set_index(claims["claim"].str.split().str[:3].str.join(" "))


def _reach(batch, steps, previous=None, target=2.0, censored=()) -> pd.DataFrame:
    """Hand-made steps-to-target points of one target (sequences, steps), each crossed between its
    `previous` step (default: exactly at `steps`, the crossing step) and `steps`; the batches in
    `censored` reached it at their first evaluation (previous step 0)."""
    batch, steps = np.asarray(batch, float), np.asarray(steps, float)
    first = np.isin(batch, censored)
    previous = steps if previous is None else np.asarray(previous, float)
    return pd.DataFrame(
        {
            "batch_size": batch.astype(int),
            "steps": steps,
            "previous step": np.where(first, 0, previous),
            "crossing step": steps,
            "left-censored": first,
            "tokens": steps * batch,
            "target": target,
        }
    )


BATCHES = np.array([1, 2, 4, 8, 16, 32, 64], float)


def test_fit_targets_recovers_b_crit_and_skips_targets_with_few_batches():
    runs, evals = _hyperbola_sweep(10, 160)  # B_crit = 16 sequences
    reach = steps_to_target(runs, evals, [2.0])
    only_two = reach[reach["batch_size"] <= 2].assign(target=3.0)
    trajectory = _trajectory([1.0, 5.0, 9.0], losses=[3.0, 2.1, 1.5])
    fits, mc = fit_targets(pd.concat([reach, only_two]), trajectory)
    assert fits["target"].tolist() == [2.0] and list(mc) == [2.0]
    row = fits.iloc[0]
    assert row["B_crit"] == pytest.approx(16, rel=0.1)
    assert row["B_crit lo"] <= row["B_crit"] <= row["B_crit hi"]
    assert row["batch sizes"] == 7 and row["max |log residual|"] < 0.05
    assert (row["smallest batch"], row["largest batch"]) == (1, 64)
    assert (row["B_simple"], row["B_simple loss gap"]) == pytest.approx((5.0, 0.1))


def test_b_simple_near_takes_each_runs_evaluation_nearest_the_target():
    trajectory = pd.concat(
        [
            _trajectory([1.0, 2.0, 4.0], losses=[3.0, 2.5, 2.0], batch=8),
            _trajectory([2.0, 6.0, np.nan], losses=[3.0, 2.4, 2.0], batch=32),
        ]
    )
    assert b_simple_near(trajectory, 2.45) == pytest.approx((4.0, 0.05))  # median of 2 and 6
    assert all(math.isnan(v) for v in b_simple_near(EMPTY_TRAJECTORY, 2.0))


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


def test_noise_growth_stops_at_the_best_val_loss():
    # loss falls over the first 6 evaluations, then rises: B_simple after that is not counted
    losses = [3.0, 2.8, 2.6, 2.4, 2.2, 2.0, 2.1, 2.3]
    growth = noise_growth(_trajectory([1, 1, 2, 2, 4, 4, 100, 100], losses))
    row = growth.iloc[0]
    assert row["evaluations"] == 6 and row["ratio"] == pytest.approx(4.0)
    assert (row["val loss first"], row["val loss last"]) == (3.0, 2.0)


@pytest.mark.parametrize(
    "b_simple,verdict",
    [
        ([1.0, 1.2, 2.0, 2.5, 3.0, 3.5], "agrees"),  # x3 while the loss falls
        ([3.0, 2.8, 2.5, 2.0, 1.5, 1.0], "disagrees"),  # falls
        ([1.0, 1.0, 1.1, 1.1, 1.2, 1.2], "undetermined"),  # x1.2: a rise, but not a clear one
        ([1.0], "undetermined"),  # one evaluation
        ([-0.5, -0.2, 0.1, 0.5, 1.0, 2.0], "undetermined"),  # negative estimates: no ratio
    ],
)
def test_noise_scale_claim_in_all_three_directions(b_simple, verdict):
    claims = _claims(trajectory=_trajectory(b_simple))
    assert claims.loc["the gradient noise", "agrees?"] == verdict
    assert "batch 8: B_simple" in claims.loc["the gradient noise", "measured here"]


def test_noise_scale_claim_needs_every_run_to_rise():
    both = pd.concat(
        [_trajectory([1, 2, 3, 4, 5, 6], batch=8), _trajectory([3, 3, 2, 2, 1, 1], batch=32)]
    )
    assert _claims(trajectory=both).loc["the gradient noise", "agrees?"] == "undetermined"


@pytest.mark.parametrize(
    "steps,verdict,why",
    [
        # the review's two cases: residuals are zero, but B_crit lies outside the batches
        (3200 / BATCHES, "undetermined", "above the largest batch"),  # never levels off
        (np.full(7, 100.0), "undetermined", "below the smallest batch"),  # flat throughout
        (100 + 3200 / BATCHES, "agrees", ""),  # B_crit = 32 inside 1-64
        ([100, 400, 50, 300, 80, 200, 60], "disagrees", "miss the hyperbola"),  # not S(B) at all
    ],
)
def test_hyperbola_claim_needs_b_crit_inside_the_measured_batches(steps, verdict, why):
    fits, _ = fit_targets(_reach(BATCHES, steps), EMPTY_TRAJECTORY)
    row = _claims(fits=fits.assign(B_simple=32.0)).loc["steps fall ~1/B"]
    assert row["agrees?"] == verdict and why in row["measured here"]
    assert "B_crit" in row["measured here"] and "B_simple" in row["measured here"]


def test_resolution_miss_is_zero_inside_each_points_bracket():
    part = _reach([1, 2, 4], [300, 300, 300], previous=[100, 250, 0])
    miss = resolution_miss({"S_min": 100.0, "E_min": 0.0}, part)  # predicts 100 steps everywhere
    assert miss == pytest.approx([0.0, math.log(2.5), 0.0])


def test_hyperbola_claim_allows_for_evaluation_resolution():
    """Batch 64 reached the target at its evaluation of step 300, after one at step 100: the true
    150 steps lie in between. The plain log residual exceeds the tolerance; the miss beyond the
    resolution bracket does not."""
    steps = np.append(100 + 3200 / BATCHES[:-1], 300)
    fits, _ = fit_targets(_reach(BATCHES, steps, np.append(steps[:-1], 100)), EMPTY_TRAJECTORY)
    assert fits.loc[0, "max |log residual|"] > RESIDUAL_TOLERANCE >= fits.loc[0, "max log miss"]
    assert _claims(fits=fits.assign(B_simple=32.0)).loc["steps fall ~1/B", "agrees?"] == "agrees"
    fits, _ = fit_targets(_reach(BATCHES, steps), EMPTY_TRAJECTORY)  # measured exactly: a miss
    assert _claims(fits=fits).loc["steps fall ~1/B", "agrees?"] == "disagrees"


def test_fits_leave_out_left_censored_points_but_check_their_bound():
    """Batch 1 reached the target at its first evaluation, step 5000 (the hyperbola's 3300 lies
    below): not fitted, B_crit exact from the other six; a bound of 1000 steps, below the
    hyperbola, is a miss. Three points of which one is censored give no fit."""
    steps = 100 + 3200 / BATCHES

    def fit(bound):
        part = _reach(BATCHES, np.append(bound, steps[1:]), censored=[1])
        return fit_targets(part, EMPTY_TRAJECTORY)[0]

    fits = fit(5000)
    row = fits.iloc[0]
    assert (row["batch sizes"], row["left-censored"], row["smallest batch"]) == (6, 1, 2)
    assert row["B_crit"] == pytest.approx(32, rel=1e-4)
    assert row["max log miss"] == pytest.approx(0, abs=1e-9)
    claim = _claims(fits=fits.assign(B_simple=32.0)).loc["steps fall ~1/B"]
    assert "(1 more reached it at their first evaluation: not fitted)" in claim["measured here"]
    assert fit(1000).loc[0, "max log miss"] == pytest.approx(math.log(3300 / 1000))
    three = _reach(BATCHES[:3], steps[:3], censored=[1])
    assert fit_targets(three, EMPTY_TRAJECTORY)[0].empty


def _epoch_sweep(shape: str):
    """Batches 2-32 on a pool of 1248 sequences, evaluated once per epoch (steps 1248 e / B), whose
    val loss reaches 2.0 at S(B) = 40 + 1200 / B (B_crit 30): every batch between its first and
    second evaluation (E = 40 B + 1200 in 1280-2480 sequences), so the evaluation steps alone give
    S = 2496 / B exactly. Loss curves linear in log(step) ("log") or 1 + S(B) / step ("power")."""
    runs, evals = [], []
    for b in (2, 4, 8, 16, 32):
        s_b = 40 + 1200 / b
        runs.append({"run_id": str(b), "batch_size": b})
        for step in (1248 * e // b for e in (1, 2, 3)):
            loss = 2 - 0.5 * math.log(step / s_b) if shape == "log" else 1 + s_b / step
            evals.append({"run_id": str(b), "step": step, "tokens": step * b, "val_loss": loss})
    return pd.DataFrame(runs), pd.DataFrame(evals)


@pytest.mark.parametrize("shape,tolerance", [("log", 1e-6), ("power", 0.05)])
def test_b_crit_is_not_an_artefact_of_the_evaluation_grid(shape, tolerance):
    reach = steps_to_target(*_epoch_sweep(shape), [2.0])
    assert reach["steps"].tolist() == [2496 // b for b in (2, 4, 8, 16, 32)]  # the grid: S ~ 1/B
    assert fit_mccandlish(reach["batch_size"], reach["steps"])["B_crit"] > 1e6
    fits, _ = fit_targets(reach, EMPTY_TRAJECTORY)
    row = fits.iloc[0]
    assert row["B_crit"] == pytest.approx(30, rel=tolerance)
    assert 2 <= row["B_crit lo"] <= row["B_crit"] <= row["B_crit hi"] < 40


def test_hyperbola_claim_with_noise_and_without_a_fit():
    rng = np.random.default_rng(1)
    batch = np.append(BATCHES, 128)
    noisy = (100 + 3200 / batch) * np.exp(rng.normal(0, 0.03, len(batch)))
    fits, _ = fit_targets(_reach(batch, noisy), EMPTY_TRAJECTORY)
    assert _claims(fits=fits.assign(B_simple=32.0)).loc["steps fall ~1/B", "agrees?"] == "agrees"
    assert _claims().loc["steps fall ~1/B", "agrees?"] == "undetermined"


@pytest.mark.parametrize(
    "b_simple,verdict,why",
    [
        (20.0, "agrees", ""),  # within x3 of B_crit's interval around 32
        (500.0, "disagrees", "more than x3 outside"),  # the review's case: far above
        (2.0, "disagrees", "more than x3 outside"),
        (np.nan, "undetermined", "B_simple not measured"),
    ],
)
def test_hyperbola_claim_needs_b_simple_near_b_crit(b_simple, verdict, why):
    fits, _ = fit_targets(_reach(BATCHES, 100 + 3200 / BATCHES), EMPTY_TRAJECTORY)
    row = _claims(fits=fits.assign(B_simple=b_simple)).loc["steps fall ~1/B"]
    assert row["agrees?"] == verdict and why in row["measured here"]


def _sized_sweeps(b_star_of_pool: dict[int, float]):
    """Hyperbola sweeps on pools of 1, 2, 4 M tokens whose Zhang B* (from batch 1) is given."""
    parts = [
        _hyperbola_sweep(10, 10 * (b_star - 1.2) / 0.2, pool=f"p{k}")
        for k, b_star in b_star_of_pool.items()
    ]
    runs = pd.concat([p[0] for p in parts], ignore_index=True)
    evals = pd.concat([p[1] for p in parts], ignore_index=True)
    tokens = {f"p{k}": k * 1_000_000 for k in b_star_of_pool}
    return pool_size_scaling(runs, evals, tokens, n_batches=7, seq_len=1)


def test_pool_size_scaling_fits_each_pool_with_intervals_and_a_power_law():
    parts = [_hyperbola_sweep(10, 40 * k, pool=f"p{k}") for k in (1, 2, 4)]  # B_crit 4, 8, 16
    runs = pd.concat([p[0] for p in parts], ignore_index=True)
    evals = pd.concat([p[1] for p in parts], ignore_index=True)
    tokens = {"p1": 1_000_000, "p2": 2_000_000, "p4": 4_000_000}
    scaling, points = pool_size_scaling(runs, evals, tokens, n_batches=7, seq_len=1)
    assert scaling["pool tokens"].tolist() == [1_000_000, 2_000_000, 4_000_000]
    assert sorted(points["pool tokens"].unique()) == [1_000_000, 2_000_000, 4_000_000]
    assert scaling["B_crit"].is_monotonic_increasing
    assert (scaling["B_crit lo"] <= scaling["B_crit"]).all()
    assert (scaling["B_crit"] <= scaling["B_crit hi"]).all()
    law = scaling_laws(scaling, points)
    assert law["B_crit"]["alpha"] == pytest.approx(1.0, abs=0.15)
    assert law["B_crit"]["alpha lo"] <= law["B_crit"]["alpha"] <= law["B_crit"]["alpha hi"]
    assert scaling_laws(scaling.assign(**{"B*": [1.0, np.nan, 2.0]}), points) == {}
    assert scaling_laws(scaling.assign(**{"B*": [1.0, np.inf, 2.0]}), points) == {}


def test_pool_size_scaling_without_three_batches_gives_no_fit():
    runs, evals = _hyperbola_sweep(10, 40, batches=(1, 2))
    scaling, _ = pool_size_scaling(runs, evals, {"p": 1000}, n_batches=3, seq_len=1)
    assert np.isnan(scaling.loc[0, "B_crit"]) and np.isnan(scaling.loc[0, "B*"])


@pytest.mark.parametrize(
    "b_star,verdict",
    [
        ({k: 22.7 * k**0.47 for k in (1, 2, 4)}, "agrees"),  # interval about 0.37-0.53
        ({k: 20.0 for k in (1, 2, 4)}, "disagrees"),  # B* does not grow: interval around 0
        ({k: 1.2 + 0.2 * 4 * k for k in (1, 2, 4)}, "undetermined"),  # B* 2-4: contains 0 and 0.47
    ],
)
def test_data_scaling_claim_in_all_three_directions(b_star, verdict):
    scaling, points = _sized_sweeps(b_star)
    law = scaling_laws(scaling, points)
    lo, hi = law["B*"]["alpha lo"], law["B*"]["alpha hi"]
    row = _claims(law=law).loc["B* (20% over"]
    assert row["agrees?"] == verdict and f"90% CI {lo:.3g} to {hi:.3g}" in row["measured here"]


def test_data_scaling_claim_rule_on_hand_made_intervals():
    def law(alpha, lo, hi):
        return {"B*": {"alpha": alpha, "alpha lo": lo, "alpha hi": hi}, "B_crit": {"alpha": 1.0}}

    def verdict(*args):
        return _claims(law=law(*args) if args else None).loc["B* (20% over", "agrees?"]

    assert verdict(0.5, 0.3, 0.7) == "agrees"
    assert verdict(1.2, 0.9, 1.5) == "disagrees"  # grows, but faster than D^0.47
    assert verdict(-0.2, -0.4, 0.0) == "disagrees"
    assert verdict(0.4, -0.3, 1.1) == "undetermined"
    assert verdict(0.4, np.nan, np.nan) == "undetermined"
    assert verdict() == "undetermined"  # no fit
    beyond = SCALING.assign(**{"B*": [4, 6, 4e11]})  # steps never level off on the largest pool
    row = _claims(law=law(0.5, 0.3, 0.7), scaling=beyond).loc["B* (20% over"]
    assert row["agrees?"] == "undetermined"
    assert (
        "beyond the largest batch reaching the target on the 4,000,000-token"
        in row["measured here"]
    )


def test_zhou_claim_is_undetermined_on_cosine_runs():
    fits, _ = fit_targets(_reach(BATCHES, 100 + 3200 / BATCHES), EMPTY_TRAJECTORY)
    row = _claims(fits=fits, lr_schedule="cosine").loc["a minimum batch"]
    assert row["agrees?"] == "undetermined"
    assert row["measured here"].endswith("(cosine runs here, Zhou et al. fit WSD)")


DENSE = np.array([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64], float)


@pytest.mark.parametrize(
    "tokens,verdict",
    [
        # fewest tokens at batch 8, more at both ends: an interior B_opt, a rising tail (B_min > 0)
        (1000 * (1 + 0.1 * (np.log2(DENSE) - 3) ** 2), "agrees"),
        (100 * DENSE + 3200, "disagrees"),  # tokens fall all the way to batch 1: no B_min
        (np.full(12, 3200.0), "undetermined"),  # tokens flat: B_min 0, no token minimum
    ],
)
def test_zhou_claim_on_wsd_runs_in_all_three_directions(tokens, verdict):
    fits, _ = fit_targets(_reach(DENSE, tokens / DENSE), EMPTY_TRAJECTORY)
    assert _claims(fits=fits, lr_schedule="wsd").loc["a minimum batch", "agrees?"] == verdict
    assert _claims(lr_schedule="wsd").loc["a minimum batch", "agrees?"] == "undetermined"


def test_zhou_claim_needs_b_opt_determined_in_nearly_every_resample():
    """With 7 batch sizes, dropping batch 8 from a resample often leaves the fewest tokens at an
    edge of the parabola's window: B_opt is then not determined, nor is the claim."""
    tokens = 1000 * (1 + 0.1 * (np.log2(BATCHES) - 3) ** 2)
    fits, _ = fit_targets(_reach(BATCHES, tokens / BATCHES), EMPTY_TRAJECTORY)
    assert fits.loc[0, "B_opt"] > 0 and np.isnan(fits.loc[0, "B_opt lo"])
    assert _claims(fits=fits, lr_schedule="wsd").loc["a minimum batch", "agrees?"] == "undetermined"


def test_bootstrap_needs_four_batch_sizes_and_wsd_counts_repeated_points_once():
    """Every resample of three points that keeps three batch sizes is the points themselves; a
    resample that repeats the smallest batch still gives the tail's slope."""
    batch = np.array([1.0, 2.0, 4.0])
    interval = bootstrap(fit_mccandlish, batch, 100 + 320 / batch, "B_crit")
    assert all(math.isnan(end) for end in interval)
    repeated = fit_wsd(np.array([1.0, 1.0, 2.0]), np.array([50.0, 50.0, 20.0]))
    assert repeated["B_min"] == pytest.approx((50 - 40) / (50 - 20))


# --- schedules vs the best fixed batch: cross-fitted endpoints over validation documents ---------

DOC_TOKENS = np.full(40, 100)


def _doc_losses(mean: float, seed: int) -> np.ndarray:
    """Per-document summed losses (nats) of 40 documents of 100 tokens: documents differ a lot, an
    arm shifts all of them by `mean` - 3 with a little noise of its own."""
    spread = 0.3 * np.random.default_rng(0).standard_normal(40)
    base = 3.0 + spread - spread.mean()
    noise = 0.01 * np.random.default_rng(seed).standard_normal(40)
    return (base + (mean - 3.0) + noise) * DOC_TOKENS


def _add_run(documents: dict, rid: str, mean: float, seed: int, steps=(10, 20)) -> list[dict]:
    """Put a run's per-document losses in `documents` and return its evaluation rows."""
    for step in steps:
        losses = _doc_losses(mean + 0.1 * (step < max(steps)), seed)
        documents[(rid, step)] = (losses, DOC_TOKENS)
    return [
        {"run_id": rid, "step": s, "epoch": s / 10, "tokens": s * 100, "train_loss": mean - 0.2}
        | {"val_loss": mean + 0.1 * (s < max(steps))}
        for s in steps
    ]


POOLS = ("/pools/p0", "/pools/p1", "/pools/p2")


def _schedule_study(ramp_up_shift: float) -> tuple[Results, Results]:
    """On each of three pools: fixed batches 2 and 8 (lr 1e-3, 3e-3 and 9e-3; batch 8 at lr 3e-3
    best, 3.0 nats) at 2 epochs, batch 8 also at 1 epoch (a different budget: left out), and
    ramp-up / ramp-down schedules whose best lr is `ramp_up_shift` from the best fixed batch
    (ramp-down 0.1 worse); every arm's lr is bracketed. Returns (fixed, scheduled)."""
    fixed = [(2, 1e-3, 3.2), (2, 3e-3, 3.1), (8, 1e-3, 3.05), (8, 3e-3, 3.0)]
    fixed += [(2, 9e-3, 3.15), (8, 9e-3, 3.1)]
    ramps = [("0:2,0.5:8", 1e-3, 3.0 + ramp_up_shift), ("0:8,0.5:2", 1e-3, 3.1)]
    ramps += [(s, lr, 3.3) for s in ("0:2,0.5:8", "0:8,0.5:2") for lr in (3.33e-4, 3e-3)]
    runs, evals, schedule_runs, schedule_evals, documents = [], [], [], [], {}
    for p, pool in enumerate(POOLS):
        base = {"pool": pool, "seed": 0, "model": "tiny", "weight_decay": 0.1, "status": "done"}
        for i, (batch, lr, mean) in enumerate([*fixed, (8, 3e-3, 2.5)]):
            epochs = 1 if i == len(fixed) else 2
            rid = f"f{i}-{p}"
            runs.append(base | {"run_id": rid, "batch_size": batch, "lr": lr, "epochs": epochs})
            evals += _add_run(documents, rid, mean, seed=i + 100 * p)
        for i, (schedule, lr, mean) in enumerate(ramps):
            rid = f"s{i}-{p}"
            schedule_runs.append(
                base
                | {"run_id": rid, "batch_size": 8, "lr": lr, "epochs": 2}
                | {"batch_schedule": schedule}
            )
            schedule_evals += _add_run(documents, rid, mean, seed=10 + i + 100 * p)
    load = memory_documents(documents)
    fixed_results = Results(pd.DataFrame(runs).assign(batch_schedule=""), pd.DataFrame(evals), load)
    return fixed_results, Results(pd.DataFrame(schedule_runs), pd.DataFrame(schedule_evals), load)


SCHEDULES = {"ramp-up": "0:2,0.5:8", "ramp-down": "0:8,0.5:2"}


def test_schedules_vs_fixed_compares_held_out_arms_on_the_same_budget():
    result = schedules_vs_fixed(*_schedule_study(-0.05), SCHEDULES)
    assert result.table["policy"].tolist() == 3 * ["fixed batch 2", "fixed batch 8"] + 3 * [
        "ramp-up (0:2,0.5:8)",
        "ramp-down (0:8,0.5:2)",
    ] + 3 * ["best fixed batch (chose 8)"] + 3 * ["best schedule (chose ramp-up)"]
    loss = result.table.groupby("policy")["val loss (cross-fitted)"].mean()
    assert loss["fixed batch 8"] == pytest.approx(3.0, abs=0.01)  # not the 1-epoch run's 2.5
    assert loss["best schedule (chose ramp-up)"] == pytest.approx(2.95, abs=0.01)
    assert result.difference.value == pytest.approx(-0.05, abs=0.01)
    assert result.label == "best schedule (ramp-up) - best fixed batch (8), 2 epochs"
    assert list(result.curves) == [
        "best fixed batch (chose 8)",
        "ramp-up (0:2,0.5:8)",
        "ramp-down (0:8,0.5:2)",
    ]
    assert result.curves["ramp-up (0:2,0.5:8)"]["run_id"].unique().tolist() == ["s0-0"]


@pytest.mark.parametrize(
    "shift,verdict", [(-0.05, "agrees"), (0.05, "disagrees"), (0.0, "undetermined")]
)
def test_schedule_claim_in_all_three_directions(shift, verdict):
    result = schedules_vs_fixed(*_schedule_study(shift), SCHEDULES)
    row = _claims(schedules=result).loc["a batch-size schedule"]
    assert row["agrees?"] == verdict
    assert "interval over replicates and validation documents" in row["measured here"]
    assert _claims().loc["a batch-size schedule", "agrees?"] == "undetermined"  # not measured


def test_schedules_train_at_the_best_fixed_batchs_budget_and_weight_decay(hand_made):
    """The best run overall (batch 4, 8 epochs, decay 1) sets the slice, not the largest budget
    or the schedules' reference batch; a budget too short for every phase moves up."""
    fixed = ((8, 16, 0.1, 3.1), (4, 8, 1.0, 2.9), (8, 8, 0.1, 3.0), (4, 2, 0.1, 2.8))
    for batch, epochs, decay, loss in fixed:
        hand_made.add(loss, batch_size=batch, epochs=epochs, weight_decay=decay)
    results = hand_made.results()
    epochs = results.runs["epochs"]
    ramp = ["0:2,0.5:8"]
    assert schedule_slice(results.subset(epochs != 2), ramp) == (8, 1.0)
    assert schedule_slice(results, ramp) == (2, 0.1)
    assert schedule_slice(results, ["0:2,0.5:8,0.75:32"]) == (8, 0.1)
    with pytest.raises(ReproError, match="gives every phase"):
        schedule_slice(results.subset(epochs == 2), ["0:2,0.75:32"])


def test_schedules_without_a_matching_fixed_budget_are_a_one_line_error():
    fixed, scheduled = _schedule_study(0.0)
    with pytest.raises(ReproError, match="no fixed-batch run at the schedules' 2 epochs"):
        schedules_vs_fixed(fixed.subset(fixed.runs["epochs"] == 1), scheduled, SCHEDULES)
    with pytest.raises(ReproError, match="share one epoch budget"):
        runs = scheduled.runs
        mixed = runs.assign(epochs=[1] + [2] * (len(runs) - 1))
        schedules_vs_fixed(fixed, Results(mixed, scheduled.evals, scheduled.documents), SCHEDULES)
