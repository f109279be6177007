"""Critical batch size: fits that recover known constants, steps-to-target, intervals over pools,
the notebook's analyses, and the claims of notebook 05 read off intervals over pools, each on
hand-made data in all three directions (agrees, disagrees, undetermined) with 3 pools, with one
pool contradicting the other two, and with 2 pools (the noise-scale claim:
tests/test_noise_scale.py)."""

import math
import re

import numpy as np
import pandas as pd
import pytest

from repro.analysis.batch_schedules import ScheduleComparison, schedule_slices, schedules_vs_fixed
from repro.analysis.cbs import (
    FAILED,
    b_simple_near,
    fit_intervals,
    fit_mccandlish,
    fit_targets,
    fit_wsd,
    fit_zhang,
    interval_of,
    pool_interval,
    pool_size_scaling,
    power_law,
    reach_count,
    reachable_target,
    resolution_miss,
    scaling_laws,
    steps_to_target,
    target_losses,
)
from repro.analysis.cbs_claims import B_SIMPLE_FACTOR, RESIDUAL_TOLERANCE, cbs_claims
from repro.analysis.intervals import Difference
from repro.analysis.noise import (
    NOISE_SCALE_TABLE,
    noise_scale_gap,
    noise_scale_range,
    noise_scale_regime,
)
from repro.analysis.results import MemoryDocuments, Results
from repro.data.pool import load_pool
from repro.design.preset_files import PRESETS
from repro.design.presets import changed
from repro.errors import ReproError
from repro.runtime.config import parse_batch_schedule
from repro.store.grid import expand
from repro.study import Study


def _results(runs: pd.DataFrame, evals: pd.DataFrame) -> Results:
    """Hand-made runs and evaluations, without per-document losses."""
    return Results(runs, evals, MemoryDocuments({}))


def test_fits_recover_known_constants():
    batch = np.array([1, 2, 4, 8, 16, 32, 64, 128], float)
    s_min, e_min = 100.0, 3200.0  # B_crit = 32 sequences
    steps = s_min + e_min / batch
    mc = fit_mccandlish(batch, steps)
    assert mc["S_min"] == pytest.approx(s_min, rel=1e-4)
    assert mc["B_crit"] == pytest.approx(32, rel=1e-4)
    assert np.abs(mc["residuals"]).max() < 1e-6
    zh = fit_zhang(batch, steps)
    assert (zh["a"], zh["b"]) == pytest.approx((s_min, e_min), rel=1e-4)
    assert zh["B_star"] == pytest.approx(1.2 * 1 + 0.2 * 32, rel=1e-4)


def test_wsd_fit_recovers_b_opt_and_b_min_and_counts_repeated_points_once():
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
    repeated = fit_wsd(np.array([1.0, 1.0, 2.0]), np.array([50.0, 50.0, 20.0]))
    assert repeated["B_min"] == pytest.approx((50 - 40) / (50 - 20))


def test_power_law_recovers_exponent():
    d = np.array([7.5, 15, 30, 60])
    fit = power_law(d, 22.7 * d**0.47)
    assert fit["alpha"] == pytest.approx(0.47) and fit["c"] == pytest.approx(22.7)


# --- intervals over pools -----------------------------------------------------------------------


def test_pool_interval_is_a_t_interval_of_the_logs_over_pools():
    values = [10.0, 20.0, 40.0]  # logs log 10 + (0, 1, 2) log 2: mean log 20, sd log 2
    d = pool_interval(values, log=True)
    half = 2.919986 * math.log(2) / math.sqrt(3)  # t(0.95, 2) * sd / sqrt(n)
    assert d.value == pytest.approx(20.0)
    assert (d.low, d.high) == pytest.approx((20 * math.exp(-half), 20 * math.exp(half)))
    assert d.per_replicate == (10.0, 20.0, 40.0) and d.decisive
    linear = pool_interval([-1.0, 0.0, 1.0])
    assert linear.value == 0.0 and linear.low < -1 and linear.high > 1


def test_a_pool_without_a_finite_value_gives_no_interval_but_keeps_the_pools():
    infinite = pool_interval([10.0, math.inf, 12.0], log=True)
    assert infinite.value == math.inf and np.isinf(infinite.low) and not infinite.decisive
    assert infinite.per_replicate[1] == math.inf
    missing = pool_interval([10.0, math.nan, 12.0], log=True)
    assert math.isnan(missing.value) and not missing.decisive
    assert not pool_interval([10.0, -1.0, 12.0], log=True).decisive  # log of a negative
    assert pool_interval([10.0, -1.0, 12.0]).decisive  # a linear quantity may be negative
    assert not pool_interval([10.0, 12.0], log=True).decisive  # 2 of 3 pools
    assert np.isinf(pool_interval([10.0], log=True).low)


# --- steps to a target ---------------------------------------------------------------------------


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
    table = steps_to_target(_results(runs, evals), [2.4, 1.0], seq_len=16)
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
    table = steps_to_target(_results(runs, evals), [2.0], seq_len=16)
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
    table = steps_to_target(_results(runs, evals), [2.0])
    assert table[["steps", "previous step", "left-censored"]].values.tolist() == [
        [50, 0, True],
        [50, 25, False],
    ]
    assert table["crossing step"].tolist() == pytest.approx([50, 25 * 2**0.5])
    assert table["tokens"].tolist() == pytest.approx([100, 4 * 25 * 2**0.5])  # tokens per step


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


def test_targets_are_shared_by_the_pools_and_reachable_on_every_one():
    """Pool "q" reaches lower losses than "p" (its curves are shifted down): the hardest target
    is p's, which q reaches too."""
    runs_p, evals_p = _hyperbola_sweep(10, 160, pool="p")
    runs_q, evals_q = _hyperbola_sweep(10, 160, pool="q")
    evals_q = evals_q.assign(val_loss=evals_q["val_loss"] - 0.05)
    runs, evals = pd.concat([runs_p, runs_q]), pd.concat([evals_p, evals_q])
    targets = target_losses(_results(runs, evals), 3)
    hardest = reachable_target(_results(runs_p, evals_p), 3)
    assert (
        targets[0] == hardest > reachable_target(_results(runs_q, evals_q), 3) and len(targets) == 3
    )
    first = evals.groupby("run_id")["val_loss"].first().min()
    assert targets[-1] == round(hardest + 0.6 * (first - hardest), 3)


def _noise_near(pools, b_simple, target=2.0) -> pd.DataFrame:
    """Noise-scale evaluations at val loss `target`, one per pool, with the given B_simple."""
    return pd.DataFrame(
        {"pool": pools, "batch_size": 8, "epoch": 1.0, "tokens": 1000}
        | {"val_loss": target, "b_simple": b_simple}
    )


EMPTY_TRAJECTORY = _noise_near([], [])


def test_b_simple_near_takes_each_runs_evaluation_nearest_the_target():
    trajectory = pd.DataFrame(
        {
            "pool": "p",
            "batch_size": [8, 8, 8, 32, 32, 32],
            "tokens": [1, 2, 3, 1, 2, 3],
            "val_loss": [3.0, 2.5, 2.0, 3.0, 2.4, 2.0],
            "b_simple": [1.0, 2.0, 4.0, 2.0, 6.0, np.nan],
        }
    )
    assert b_simple_near(trajectory, 2.45) == pytest.approx((4.0, 0.05))  # median of 2 and 6
    short = trajectory.assign(val_loss=[3.0, 2.5, 2.0, 3.2, 3.1, 3.0])  # batch 32 stops at 3.1
    assert b_simple_near(short, 2.45) == pytest.approx((2.0, 0.05))  # batch 8's alone
    assert all(math.isnan(v) for v in b_simple_near(EMPTY_TRAJECTORY, 2.0))


def test_the_presets_noise_scale_is_b_simple_nearest_the_best_tuned_loss_on_each_pool():
    """Best tuned loss: batch 4's mean over pools, (2.0 + 2.2) / 2 = 2.1 (batch 1's is 2.3). Pool
    a's runs are nearest it at 2.12 (B_simple 5) and 2.09 (7): median 6 sequences, 96 tokens at
    seq_len 16, loss gap 0.02; pool b's at 2.15 (12 sequences, 192 tokens), gap 0.05. The grid
    1..32 over them: 1/6 to 32/6 and 1/12 to 32/12; the range over pools 96 to 192 tokens."""
    endpoints = pd.DataFrame(
        {"pool": ["a", "b", "a", "b"], "batch_size": [1, 1, 4, 4]}
        | {"val_loss": [2.2, 2.4, 2.0, 2.2]}
    )
    trajectory = pd.DataFrame(
        {
            "pool": ["runs/a"] * 7 + ["runs/b"] * 2,
            "batch_size": [8, 8, 8, 8, 32, 32, 32, 8, 8],
            "tokens": [1, 2, 3, 4, 1, 2, 3, 1, 2],
            "val_loss": [3.0, 2.5, 2.12, 2.0, 3.0, 2.3, 2.09, 2.5, 2.15],
            "b_simple": [1.0, 2.0, 5.0, 9.0, 2.0, 4.0, 7.0, 3.0, 12.0],
        }
    )
    table = noise_scale_regime(trajectory, endpoints, [1, 2, 4, 8, 16, 32], seq_len=16)
    assert table["pool"].tolist() == ["a", "b"]
    assert table["target"].tolist() == pytest.approx([2.1, 2.1])
    assert table["loss gap"].tolist() == pytest.approx([0.02, 0.05])
    assert table["B_simple (sequences)"].tolist() == pytest.approx([6.0, 12.0])
    assert table["B_simple (tokens)"].tolist() == pytest.approx([96.0, 192.0])
    assert table["smallest batch / B_simple"].tolist() == pytest.approx([1 / 6, 1 / 12])
    assert table["largest batch / B_simple"].tolist() == pytest.approx([32 / 6, 32 / 12])
    assert noise_scale_range(table) == pytest.approx((96.0, 192.0))
    assert noise_scale_gap(table) == pytest.approx(0.05)
    unmeasured = table.assign(**{"B_simple (tokens)": [np.nan, -5.0]})
    assert noise_scale_range(unmeasured) is None and math.isnan(noise_scale_gap(unmeasured))
    assert table[FAILED].tolist() == ["", ""]
    # pool b's B_simple negative: a failed fit (NaN, named), not a number; pool a's unchanged
    negative = trajectory.assign(
        b_simple=trajectory["b_simple"].where(trajectory["pool"] == "runs/a", -12.0)
    )
    failed = noise_scale_regime(negative, endpoints, [1, 2, 4, 8, 16, 32], seq_len=16)
    assert failed[FAILED].tolist() == ["", "B_simple < 0"]
    assert failed["B_simple (sequences)"].iloc[0] == pytest.approx(6.0)
    assert failed[["B_simple (sequences)", "largest batch / B_simple"]].iloc[1].isna().all()
    assert noise_scale_range(failed) == pytest.approx((96.0, 96.0))


def _summary_study(tmp_path, figures_dir=None) -> Study:
    """A smoke study (batches 2 and 8 of 32 tokens, pools not built: vocab 300) in tmp_path."""
    pools, runs = tmp_path / "pools", tmp_path / "runs"
    return Study(
        PRESETS["smoke"], tmp_path, pools, runs, 1, progress=False, figures_dir=figures_dir
    )


def test_summary_states_batch_over_noise_scale_once_notebook_05_saved_it(tmp_path):
    """Before notebook 05: not measured yet. With its table (B_simple 128 and 32 tokens): batches
    of 64 and 256 tokens give 64 / 128 to 256 / 32 = 0.5 to 8, inside the paper's 0.36 to 15; a
    reproduction's fresh figures folder still finds the committed figures/<preset>/ table."""
    line = "  batch / noise scale (tokens): "
    paper = "(paper's estimate 0.36 to 15"
    study = _summary_study(tmp_path)
    assert f"{line}not measured yet, notebook 05 measures it {paper})" in study.summary()
    table = pd.DataFrame({"pool": ["a", "b"], "B_simple (tokens)": [128.0, 32.0]})
    study.save_table(table.assign(**{"loss gap": [0.9, 0.2]}), NOISE_SCALE_TABLE)
    above = f"{line}0.5 to 8, notebook 05's measurement 0.9 nats/token above the tuned loss, not at"
    assert above in study.summary()  # its evaluations lie 0.9 nats/token from the tuned loss
    study.save_table(table.assign(**{"loss gap": [0.01, 0.02]}), NOISE_SCALE_TABLE)
    measured = f"{line}0.5 to 8, notebook 05's measurement {paper}: inside)"
    assert measured in study.summary()
    assert measured in _summary_study(tmp_path, tmp_path / "staged").summary()


def test_fit_targets_fits_each_pool_and_keeps_pools_without_a_fit():
    """Pool "a" has B_crit 16, pool "b" 8; at target 3.0 only two batches: a row, no fit."""
    parts = [_hyperbola_sweep(10, 160, pool="a"), _hyperbola_sweep(10, 80, pool="b")]
    runs = pd.concat([p[0] for p in parts])
    evals = pd.concat([p[1] for p in parts])
    reach = steps_to_target(_results(runs, evals), [2.0], by=("pool", "batch_size"))
    only_two = reach[reach["batch_size"] <= 2].assign(target=3.0)
    fits, mc = fit_targets(pd.concat([reach, only_two]), _noise_near(["a", "b"], [5.0, 4.0]))
    assert list(mc) == [("a", 2.0), ("b", 2.0)]
    assert fits[["pool", "target"]].values.tolist() == [
        ["a", 2.0],
        ["a", 3.0],
        ["b", 2.0],
        ["b", 3.0],
    ]
    fitted = fits.set_index(["pool", "target"])
    assert fitted.loc[("a", 2.0), "B_crit"] == pytest.approx(16, rel=0.1)
    assert fitted.loc[("b", 2.0), "B_crit"] == pytest.approx(8, rel=0.1)
    assert fitted.loc[("a", 3.0), "batch sizes"] == 2 and np.isnan(fitted.loc[("a", 3.0), "B_crit"])
    assert fitted.loc[("a", 2.0), "B_simple / B_crit"] == pytest.approx(5 / 16, rel=0.1)
    assert fitted.loc[("b", 2.0), "max |log residual|"] < 0.05
    d = interval_of(fit_intervals(fits), "B_crit", target=2.0)
    assert d.value == pytest.approx(math.sqrt(16 * 8), rel=0.1)  # geometric mean over pools
    assert d.per_replicate == pytest.approx((16, 8), rel=0.1) and not d.decisive


def test_resolution_miss_is_zero_inside_each_points_bracket():
    part = _reach([1, 2, 4], [300, 300, 300], previous=[100, 250, 0])
    miss = resolution_miss({"S_min": 100.0, "E_min": 0.0}, part)  # predicts 100 steps everywhere
    assert miss == pytest.approx([0.0, math.log(2.5), 0.0])


def _reach(batch, steps, previous=None, target=2.0, censored=(), pool="p0") -> pd.DataFrame:
    """Hand-made steps-to-target points of one pool and target (sequences, steps), each crossed
    between its `previous` step (default: exactly at `steps`, the crossing step) and `steps`; the
    batches in `censored` reached it at their first evaluation (previous step 0)."""
    batch, steps = np.asarray(batch, float), np.asarray(steps, float)
    first = np.isin(batch, censored)
    previous = steps if previous is None else np.asarray(previous, float)
    return pd.DataFrame(
        {
            "pool": pool,
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
POOLS3 = ("p0", "p1", "p2")
NO_SCHEDULES = ScheduleComparison(
    pd.DataFrame(), pd.DataFrame(), Difference(np.nan, -np.inf, np.inf), "schedule - fixed"
)
NO_SCALING = pd.DataFrame(columns=["seed", "pool tokens", "B_crit", "B*", "largest batch"])
VERDICTS = {"agrees", "disagrees", "undetermined"}


def _claims(fits=None, scaling=NO_SCALING, schedules=NO_SCHEDULES, lr_schedule="cosine"):
    """The claim table (one row per claim, indexed by its key)."""
    fits = pd.DataFrame() if fits is None else fits
    laws = scaling_laws(scaling) if len(scaling) else {}
    claims = cbs_claims(pd.DataFrame(), fits, scaling, laws, schedules, lr_schedule, "tiny")
    assert set(claims["agrees?"]) <= VERDICTS
    assert claims["measured here"].str.startswith("model tiny").all()
    return claims


def _fits(steps: dict[str, np.ndarray], b_simple=32.0, previous=None, **reach) -> pd.DataFrame:
    """fit_targets of hand-made points per pool (`steps`: pool -> steps per BATCHES) with
    B_simple near the target (one value, or one per pool)."""
    parts = [_reach(BATCHES, s, previous, pool=p, **reach) for p, s in steps.items()]
    b_simple = np.broadcast_to(b_simple, len(steps))
    return fit_targets(pd.concat(parts), _noise_near(list(steps), b_simple))[0]


def _hyperbolas(b_crits=(28, 32, 36), pools=POOLS3) -> dict[str, np.ndarray]:
    """Steps S(B) = 100 + 100 B_crit / B per pool."""
    return {p: 100 + 100 * b / BATCHES for p, b in zip(pools, b_crits)}


HYPERBOLA = "hyperbola"
ZIGZAG_ON_P2 = _hyperbolas() | {"p2": np.array([100, 800, 50, 600, 80, 400, 60.0])}


@pytest.mark.parametrize(
    "steps,b_simple,verdict,why",
    [
        (_hyperbolas(), 32.0, "agrees", ""),  # B_crit 28-36 inside 1-64, B_simple near it
        (  # not S(B) at all, on every pool
            {
                p: np.array([100, 400, 50, 300, 80, 200, 60]) * (1 + 0.02 * i)
                for i, p in enumerate(POOLS3)
            },
            32.0,
            "disagrees",
            "miss the hyperbola",
        ),
        (_hyperbolas(), 500.0, "disagrees", f"more than x{B_SIMPLE_FACTOR:g} away"),
        (_hyperbolas(), 2.0, "disagrees", f"more than x{B_SIMPLE_FACTOR:g} away"),
        (  # never levels off
            {p: 3200 * (1 + 0.02 * i) / BATCHES for i, p in enumerate(POOLS3)},
            32.0,
            "undetermined",
            "above the largest batch",
        ),
        ({p: np.full(7, 100.0 + i) for i, p in enumerate(POOLS3)}, 32.0, "undetermined", "below"),
        (_hyperbolas((10, 32, 60)), [10.0, 32.0, 60.0], "undetermined", "above the largest"),
        (_hyperbolas((0.5, 2, 8)), [0.5, 2.0, 8.0], "undetermined", "below the smallest"),
        (_hyperbolas(), [32.0, 32.0, 200.0], "undetermined", "spans a limit"),  # one contradicts
        (_hyperbolas(), [32.0, 32.0, 2000.0], "undetermined", "spans a limit"),  # mean off
        (ZIGZAG_ON_P2, 32.0, "undetermined", "(replicates 0.00, 0.00, 1.52)"),  # one pool misses
        (_hyperbolas(), np.nan, "undetermined", "B_simple / B_crit not finite on every pool"),
        (_hyperbolas((28, 36), POOLS3[:2]), 32.0, "undetermined", "on fewer than 3 pools"),
    ],
)
def test_hyperbola_claim_reads_intervals_over_pools(steps, b_simple, verdict, why):
    row = _claims(_fits(steps, b_simple)).loc[HYPERBOLA]
    assert row["agrees?"] == verdict and why in row["measured here"]
    assert "B_crit" in row["measured here"] and "(replicates " in row["measured here"]


def test_hyperbola_claim_lists_every_pools_b_crit():
    row = _claims(_fits(_hyperbolas())).loc[HYPERBOLA]
    b_crit = row["measured here"].split("B_crit ")[1]
    assert "(replicates 28, 32, 36)" in b_crit.split(" over batches")[0]
    assert "over batches 1-64" in row["measured here"]


def test_hyperbola_claim_allows_for_evaluation_resolution():
    """Batch 64 reached the target at its evaluation of step 300, after one at step 100, on every
    pool: the true S(64) lies in between. The plain log residual exceeds the tolerance; the miss
    beyond the resolution bracket does not."""
    steps = {p: np.append(s[:-1], 300) for p, s in _hyperbolas((31, 32, 33)).items()}
    previous = {p: np.append(s[:-1], 100) for p, s in steps.items()}
    parts = [_reach(BATCHES, steps[p], previous[p], pool=p) for p in POOLS3]
    fits = fit_targets(pd.concat(parts), _noise_near(list(POOLS3), [32.0] * 3))[0]
    assert (fits["max |log residual|"] > RESIDUAL_TOLERANCE).all()
    assert (fits["max log miss"] <= RESIDUAL_TOLERANCE).all()
    assert _claims(fits).loc[HYPERBOLA, "agrees?"] == "agrees"
    exact = _claims(_fits(steps)).loc[HYPERBOLA]  # measured exactly: a miss on every pool
    assert exact["agrees?"] == "disagrees"


def test_fits_leave_out_left_censored_points_but_check_their_bound():
    """Batch 1 reached the target at its first evaluation, step 5000 (the hyperbola's 3300 lies
    below), on every pool: not fitted, B_crit exact from the other six; a bound of 1000 steps,
    below the hyperbola, is a miss. Three points of which one is censored give no fit."""
    steps = 100 + 3200 / BATCHES

    def fits(bound):
        return _fits(dict.fromkeys(POOLS3, np.append(bound, steps[1:])), censored=[1])

    row = fits(5000).iloc[0]
    assert (row["batch sizes"], row["left-censored"], row["smallest batch"]) == (6, 1, 2)
    assert row["B_crit"] == pytest.approx(32, rel=1e-4)
    assert row["max log miss"] == pytest.approx(0, abs=1e-9)
    claim = _claims(fits(5000)).loc[HYPERBOLA, "measured here"]
    assert "(3 points reached it at a first evaluation: not fitted)" in claim
    assert fits(1000).loc[0, "max log miss"] == pytest.approx(math.log(3300 / 1000))
    three = fit_targets(_reach(BATCHES[:3], steps[:3], censored=[1]), EMPTY_TRAJECTORY)[0]
    assert three["batch sizes"].tolist() == [2] and "B_crit" not in three
    assert _claims(three).loc[HYPERBOLA, "agrees?"] == "undetermined"


def _epoch_sweep(shape: str):
    """Batches 2-32 on a pool of 1248 sequences, evaluated once per epoch (steps 1248 e / B), whose
    val loss reaches 2.0 at S(B) = 40 + 1200 / B (B_crit 30): every batch between its first and
    second evaluation (E = 40 B + 1200 in 1280-2480 sequences), so the evaluation steps alone give
    S = 2496 / B exactly. Loss curves linear in log(step) ("log") or 1 + S(B) / step ("power")."""
    runs, evals = [], []
    for b in (2, 4, 8, 16, 32):
        s_b = 40 + 1200 / b
        runs.append({"run_id": str(b), "batch_size": b, "pool": "p"})
        for step in (1248 * e // b for e in (1, 2, 3)):
            loss = 2 - 0.5 * math.log(step / s_b) if shape == "log" else 1 + s_b / step
            evals.append({"run_id": str(b), "step": step, "tokens": step * b, "val_loss": loss})
    return pd.DataFrame(runs), pd.DataFrame(evals)


@pytest.mark.parametrize("shape,tolerance", [("log", 1e-6), ("power", 0.05)])
def test_b_crit_is_not_an_artefact_of_the_evaluation_grid(shape, tolerance):
    reach = steps_to_target(_results(*_epoch_sweep(shape)), [2.0], by=("pool", "batch_size"))
    assert reach["steps"].tolist() == [2496 // b for b in (2, 4, 8, 16, 32)]  # the grid: S ~ 1/B
    assert fit_mccandlish(reach["batch_size"], reach["steps"])["B_crit"] > 1e6
    fits, _ = fit_targets(reach, EMPTY_TRAJECTORY)
    assert fits.loc[0, "B_crit"] == pytest.approx(30, rel=tolerance)


def test_without_a_fit_the_fitted_claims_are_undetermined():
    claims = _claims()
    for claim in (HYPERBOLA, "wsd-batches"):
        assert claims.loc[claim, "agrees?"] == "undetermined"
        assert "no fit" in claims.loc[claim, "measured here"]


# --- B* vs data size: one exponent per pool seed, an interval over seeds -------------------------


def _scaling(alphas, largest=64, sizes=(1_000_000, 2_000_000, 4_000_000)) -> pd.DataFrame:
    """Hand-made pool_size_scaling rows: per seed (one per exponent in `alphas`) pools of about
    `sizes` tokens whose B* = 20 D^alpha and B_crit = 10 D^alpha (D in millions)."""
    rows = [
        {"seed": seed, "pool tokens": int(t * (1 + 0.01 * seed)), "largest batch": largest}
        | {"B*": 20 * (t * (1 + 0.01 * seed) / 1e6) ** a, "B_crit": 10 * (t / 1e6) ** a}
        for seed, a in enumerate(alphas)
        for t in sizes
    ]
    return pd.DataFrame(rows)


ZHANG = "data-scaling"


@pytest.mark.parametrize(
    "alphas,largest,verdict,why",
    [
        ((0.45, 0.47, 0.49), 64, "agrees", ""),
        ((-0.02, 0.0, 0.02), 64, "disagrees", ""),  # B* does not grow
        ((1.0, 1.1, 1.2), 512, "disagrees", ""),  # grows, but faster than D^0.47
        ((0.45, 0.49, -0.5), 64, "undetermined", "not pinned down"),  # one seed contradicts
        ((0.2, 0.5, 0.8), 64, "undetermined", "not pinned down"),  # the mean alone is in the band
        ((0.45, 0.49), 64, "undetermined", "on fewer than 3 pool seeds"),
        ((0.45, 0.47, 0.49), 16, "undetermined", "an extrapolation"),  # B* beyond batch 16
    ],
)
def test_data_scaling_claim_reads_the_exponent_over_pool_seeds(alphas, largest, verdict, why):
    scaling = _scaling(alphas, largest)
    row = _claims(scaling=scaling).loc[ZHANG]
    assert row["agrees?"] == verdict and why in row["measured here"]
    fitted = scaling_laws(scaling)["B*"].per_replicate
    assert fitted == pytest.approx(alphas)  # one exponent per seed
    per_seed = ", ".join(f"{a:.2f}" for a in fitted)
    assert f"(replicates {per_seed})" in row["measured here"]


def test_data_scaling_needs_a_finite_b_star_on_every_pool_of_every_seed():
    scaling = _scaling((0.45, 0.47, 0.49))
    scaling.loc[4, "B*"] = np.inf  # seed 1's middle pool never levels off
    law = scaling_laws(scaling)["B*"]
    assert np.isnan(law.per_replicate[1]) and not law.decisive
    assert _claims(scaling=scaling).loc[ZHANG, "agrees?"] == "undetermined"
    assert _claims().loc[ZHANG, "agrees?"] == "undetermined"  # no pools of several sizes


def test_pool_size_scaling_fits_each_seeds_pools():
    """Two seeds, pools of 1, 2 and 4 M tokens whose B_crit is 4, 8, 16 (seed 1: twice that)."""
    parts = [
        _hyperbola_sweep(10, 40 * k * (1 + s), pool=f"s{s}-{k}") for s in (0, 1) for k in (1, 2, 4)
    ]
    runs = pd.concat([p[0] for p in parts], ignore_index=True)
    evals = pd.concat([p[1] for p in parts], ignore_index=True)
    sized = {s: {f"s{s}-{k}": k * 1_000_000 for k in (1, 2, 4)} for s in (0, 1)}
    scaling, points = pool_size_scaling(_results(runs, evals), sized, n_batches=7, seq_len=1)
    assert scaling[["seed", "pool tokens"]].values.tolist() == [
        [s, k * 1_000_000] for s in (0, 1) for k in (1, 2, 4)
    ]
    assert sorted(points["seed"].unique()) == [0, 1]
    b_crit = scaling["B_crit"].to_numpy()
    assert b_crit == pytest.approx([4, 8, 16, 8, 16, 32], rel=0.1)
    alpha = scaling_laws(scaling)["B_crit"]
    assert alpha.per_replicate == pytest.approx((1.0, 1.0), abs=0.1) and not alpha.decisive


def test_pool_size_scaling_without_three_batches_gives_no_fit():
    runs, evals = _hyperbola_sweep(10, 40, batches=(1, 2))
    scaling, _ = pool_size_scaling(_results(runs, evals), {0: {"p": 1000}}, n_batches=3, seq_len=1)
    assert np.isnan(scaling.loc[0, "B_crit"]) and np.isnan(scaling.loc[0, "B*"])


# --- Zhou et al.'s WSD pieces --------------------------------------------------------------------

DENSE = np.array([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64], float)


def _u_tokens(shift: float) -> np.ndarray:
    """Tokens to target with their minimum near batch 2^(3 + shift), more at both ends."""
    return 1000 * (1 + 0.1 * (np.log2(DENSE) - 3 - shift) ** 2)


def _falling_tokens(slope: float) -> np.ndarray:
    """Tokens to target that fall all the way down to batch 1."""
    return slope * DENSE + 3200


def _cheap_batch_1(share: float = 0.95) -> np.ndarray:
    """_u_tokens, but batch 1 needs `share` of batch 2's tokens: below 1, tokens still fall at
    batch 1 and this pool's B_min fit fails (negative); above 1, a small positive B_min."""
    tokens = _u_tokens(0.0)
    return np.append(share * tokens[1], tokens[1:])


def _wsd_fits(tokens_per_pool: list[np.ndarray]) -> pd.DataFrame:
    """fit_targets of each pool's tokens to target per DENSE batch, the pools named as
    Preset.pool_dir names them (pool_label: "pool 0", "pool 1", ...)."""
    parts = [
        _reach(DENSE, tokens / DENSE, pool=f"/pools/tiny-synthetic-seed{i}")
        for i, tokens in enumerate(tokens_per_pool)
    ]
    return fit_targets(pd.concat(parts), EMPTY_TRAJECTORY)[0]


WSD = "wsd-batches"
STILL_FALL = " (tokens to target still fall down to the smallest batch)"


@pytest.mark.parametrize(
    "tokens,verdict,why,failed_on",
    [
        ([_u_tokens(s) for s in (-0.1, 0.0, 0.1)], "agrees", "", ""),
        # tokens fall down to batch 1 on every pool: a negative B_min is a failed fit, no verdict
        (
            [_falling_tokens(s) for s in (90, 100, 110)],
            "undetermined",
            "still fall",
            "pool 0, pool 1, pool 2",
        ),
        (
            [_u_tokens(-0.1), _u_tokens(0.1), _cheap_batch_1()],
            "undetermined",
            "fit failed: B_min < 0",
            "pool 2",
        ),
        (
            [_cheap_batch_1(0.6)] * 2 + [_u_tokens(0.0)],
            "undetermined",
            "fit failed: B_min < 0",
            "pool 0, pool 1",
        ),
        ([_u_tokens(s) for s in (-2, 0, 2)], "undetermined", "not located", ""),  # B_opt 2 to 32
        # every B_min positive, but pool 0's barely (batch 1 needs 1.05 x batch 2's tokens): the
        # interval over pools reaches below 0
        (
            [_cheap_batch_1(1.05), _u_tokens(0.0), _u_tokens(0.1)],
            "undetermined",
            "not located",
            "",
        ),
        ([_u_tokens(s) for s in (-0.1, 0.1)], "undetermined", "on fewer than 3 pools", ""),
    ],
)
def test_zhou_claim_on_wsd_runs_reads_intervals_over_pools(tokens, verdict, why, failed_on):
    """A pool whose B_min fit failed (negative) makes the claim undetermined and is named, B_min
    never given as a number; with every B_min positive the intervals over pools decide."""
    fits = _wsd_fits(tokens)
    row = _claims(fits, lr_schedule="wsd").loc[WSD]
    measured = row["measured here"]
    assert row["agrees?"] == verdict and why in measured
    assert measured.startswith("model tiny, target 2.0: B_opt ")
    if failed_on:
        assert f", B_min: fit failed: B_min < 0 on {failed_on} (90% intervals" in measured
        assert measured.endswith(STILL_FALL)
        assert measured.count("(replicates ") == 1  # B_opt's only: B_min has no number
    else:
        assert (fits["B_min"] > 0).all() and "fit failed" not in measured
        assert re.search(r", B_min \d[\d.]* \[-?[\d.]+, [\d.]+\] \(replicates ", measured)
        assert measured.count("(replicates ") == 2  # B_opt's and B_min's


def test_zhou_claim_is_undetermined_on_cosine_runs():
    fits = _wsd_fits([_u_tokens(s) for s in (-0.1, 0.0, 0.1)])
    row = _claims(fits, lr_schedule="cosine").loc[WSD]
    assert row["agrees?"] == "undetermined"
    assert row["measured here"].endswith("(cosine runs here, Zhou et al. fit WSD)")


# --- schedules vs the best fixed batch: held out over pools and documents ------------------------

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


POOLS = tuple(f"/pools/tiny-synthetic-seed{i}" for i in range(3))  # "pool 0" ... (pool_label)
FIXED = [(2, 1e-3, 3.2), (2, 3e-3, 3.1), (8, 1e-3, 3.05), (8, 3e-3, 3.0), (2, 9e-3, 3.15)]
FIXED += [(8, 9e-3, 3.1)]


def _schedule_study(shifts, pools=POOLS, decays=None) -> tuple[Results, Results]:
    """On each pool: fixed batches 2 and 8 (lr 1e-3, 3e-3 and 9e-3; batch 8 at lr 3e-3 best, 3.0
    nats) at 2 epochs, batch 8 also at 1 epoch (a different budget: left out), and ramp-up /
    ramp-down schedules whose best lr is that pool's entry of `shifts` from the best fixed batch
    (ramp-down 0.1 worse); every arm's lr is bracketed; each pool at its weight decay in `decays`
    (default 0.1 everywhere). Returns (fixed, scheduled)."""
    runs, evals, schedule_runs, schedule_evals, documents = [], [], [], [], {}
    for p, (pool, shift) in enumerate(zip(pools, shifts)):
        ramps = [("0:2,0.5:8", 1e-3, 3.0 + shift), ("0:8,0.5:2", 1e-3, 3.1)]
        ramps += [(s, lr, 3.3) for s in ("0:2,0.5:8", "0:8,0.5:2") for lr in (3.33e-4, 3e-3)]
        decay = decays[p] if decays else 0.1
        base = {"pool": pool, "seed": 0, "model": "tiny", "weight_decay": decay, "status": "done"}
        for i, (batch, lr, mean) in enumerate([*FIXED, (8, 3e-3, 2.5)]):
            epochs = 1 if i == len(FIXED) else 2
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
    load = MemoryDocuments(documents)
    fixed_results = Results(pd.DataFrame(runs).assign(batch_schedule=""), pd.DataFrame(evals), load)
    return fixed_results, Results(pd.DataFrame(schedule_runs), pd.DataFrame(schedule_evals), load)


SCHEDULES = {"ramp-up": "0:2,0.5:8", "ramp-down": "0:8,0.5:2"}


def test_schedules_vs_fixed_compares_held_out_arms_at_each_pools_slice():
    result = schedules_vs_fixed(*_schedule_study([-0.05] * 3), SCHEDULES)
    assert result.table["policy"].tolist() == 3 * ["fixed batch 2", "fixed batch 8"] + 3 * [
        "ramp-up (batch 2 -> 8 at 50% of epochs)",
        "ramp-down (batch 8 -> 2 at 50% of epochs)",
    ] + 3 * ["best fixed batch (chose 8)"] + 3 * ["best schedule (chose ramp-up)"]
    assert result.table["pool"].unique().tolist() == ["pool 0", "pool 1", "pool 2"]
    loss = result.table.groupby("policy")["val loss (cross-fitted)"].mean()
    assert loss["fixed batch 8"] == pytest.approx(3.0, abs=0.01)  # not the 1-epoch run's 2.5
    assert loss["best schedule (chose ramp-up)"] == pytest.approx(2.95, abs=0.01)
    assert result.difference.value == pytest.approx(-0.05, abs=0.01)
    assert len(result.difference.per_replicate) == 3
    assert result.label.startswith("best schedule (ramp-up) - best fixed batch (8) at each pool's")
    assert "pool 1: 2 epochs, weight decay 0.1" in result.label
    assert result.curves.groupby(["policy", "pool"]).ngroups == 3 * 3
    ramp_up = result.curves[result.curves["policy"] == "ramp-up (batch 2 -> 8 at 50% of epochs)"]
    assert sorted(ramp_up["pool"].unique()) == ["pool 0", "pool 1", "pool 2"]


def test_each_pool_meets_the_schedules_at_its_own_slice():
    """Pool 2's schedules and fixed batches sit at weight decay 1 (its held-out slice): matched
    there, the comparison is the one at a common slice."""
    common = schedules_vs_fixed(*_schedule_study([-0.05] * 3), SCHEDULES)
    fixed, scheduled = _schedule_study([-0.05] * 3, decays=(0.1, 0.1, 1.0))
    own = schedules_vs_fixed(fixed, scheduled, SCHEDULES)
    assert "pool 2: 2 epochs, weight decay 1" in own.label
    assert own.difference.value == pytest.approx(common.difference.value)
    stray = fixed.runs.assign(weight_decay=0.1)  # pool 2 has no fixed run at its slice
    with pytest.raises(ReproError, match="no fixed-batch run on pool 2 at its schedules' 2 epochs"):
        schedules_vs_fixed(Results(stray, fixed.evals, fixed.documents), scheduled, SCHEDULES)
    mixed = scheduled.runs.assign(epochs=[1] + [2] * (len(scheduled.runs) - 1))
    with pytest.raises(ReproError, match="share one epoch budget"):
        schedules_vs_fixed(fixed, Results(mixed, scheduled.evals, scheduled.documents), SCHEDULES)


SCHEDULE = "schedule-beats-fixed"


@pytest.mark.parametrize(
    "shifts,verdict",
    [
        ([-0.05] * 3, "agrees"),
        ([0.05] * 3, "disagrees"),
        ([0.0] * 3, "undetermined"),
        ([-0.05, -0.05, 0.15], "undetermined"),  # one pool contradicts the other two
        ([-0.05] * 2, "undetermined"),  # 2 pools
    ],
)
def test_schedule_claim_reads_a_held_out_interval_over_pools(shifts, verdict):
    result = schedules_vs_fixed(*_schedule_study(shifts), SCHEDULES)
    row = _claims(schedules=result).loc[SCHEDULE]
    assert row["agrees?"] == verdict
    assert "interval over pools and validation documents" in row["measured here"]
    assert row["measured here"].count("(replicates ") == 1
    assert _claims().loc[SCHEDULE, "agrees?"] == "undetermined"  # not measured


def test_the_schedule_slice_of_each_pool_is_chosen_on_the_other_pools(hand_made):
    """Pool p0 prefers 8 epochs at weight decay 1 (2.5 nats against 3.0), p1 and p2 4 epochs at
    0.1 (2.8 against 3.0): p0's slice is the others' (4, 0.1), and p1's and p2's are (8, 1), the
    mean of p0 and the third pool; alone, p0 keeps its own; a budget too short for every phase
    moves up to the next one tried."""
    losses = {"p0": (2.5, 3.0), "p1": (3.0, 2.8), "p2": (3.0, 2.8)}
    for pool, (long_decayed, short) in losses.items():
        hand_made.add(long_decayed, pool=pool, epochs=8, weight_decay=1.0)
        hand_made.add(short, pool=pool, epochs=4, weight_decay=0.1)
        hand_made.add(3.5, pool=pool, epochs=2, weight_decay=0.1)
    results = hand_made.results()
    ramp = [parse_batch_schedule("0:2,0.5:8")]
    assert schedule_slices(results, ramp) == {"p0": (4, 0.1), "p1": (8, 1.0), "p2": (8, 1.0)}
    alone = results.subset(results.runs["pool"] == "p0")
    assert schedule_slices(alone, ramp) == {"p0": (8, 1.0)}
    five_phases = [parse_batch_schedule("0:1,0.2:2,0.4:4,0.6:8,0.8:16")]  # no phase 5 in 4 epochs
    assert schedule_slices(results, five_phases)["p0"] == (8, 0.1)
    with pytest.raises(ReproError, match="gives every phase"):
        schedule_slices(
            results.subset(results.runs["epochs"] == 2), [parse_batch_schedule("0:2,0.75:32")]
        )


# --- notebook 05's pools and grids ---------------------------------------------------------------


def test_every_pool_seed_gets_sized_pools_that_share_its_tokenizer_and_the_validation_set(
    tmp_path,
):
    """The smoke preset's two seeds: each has pools of 2,000 and 4,000 tokens cut with its own
    seed, its main pool's tokenizer and the shared validation documents; the pool-size sweep and
    the main pools are every seed's."""
    preset = changed(PRESETS["smoke"], critical_batch={"pool_tokens": (2_000,)})
    study = Study(preset, tmp_path, tmp_path / "pools", tmp_path / "runs", 1, progress=False)
    sized = study.sized_pools()
    main = preset.pool_dir(tmp_path / "pools", 1).name  # smoke-synthetic_max_sentences_20-seed1
    assert list(sized) == [0, 1] and [p.name for p in sized[1]] == [f"{main}-2000tok", main]
    mains = [load_pool(pools[-1]) for pools in sized.values()]
    for pools, main in zip(sized.values(), mains):
        small = load_pool(pools[0])
        assert small.meta["seed"] == main.meta["seed"]
        assert (pools[0] / "tokenizer.json").read_text() == (
            pools[-1] / "tokenizer.json"
        ).read_text()
        assert np.array_equal(small.val.tokens, mains[0].val.tokens)
    assert mains[0].meta["seed"] != mains[1].meta["seed"]
    swept = {c.pool for grid in study.scaling_grids() for c in expand(grid)}
    assert swept == {str(p) for pools in sized.values() for p in pools}
