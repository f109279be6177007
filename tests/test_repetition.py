"""The data-constrained law fitted from a study's runs (repro.analysis.repetition): hand-made loss
curves of known R_D* recovered, the R_D*-vs-batch claim in all three directions (a batch whose
R_D* is not measured left out of it), and its calibration over simulated studies."""

import numpy as np
import pandas as pd
import pytest

from repro.analysis.repetition import (
    R_GRID,
    FreshFit,
    effective_data,
    fit_fresh,
    fit_r_star,
    r_star_claim,
    r_star_summary,
    r_star_table,
    spread_title,
)

MULTIPLES = np.array([0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0])  # D' never beyond: measured
EPOCHS = np.array([1, 2, 4, 8, 16, 32])
LAW = FreshFit(E=2.0, B=1.5, beta=0.4, rms=0.0)
POOLS = ["pool-a", "pool-b", "pool-c"]


def test_effective_data_is_fresh_at_one_epoch_and_saturates_at_one_plus_r_star():
    assert effective_data(1, 5.0) == 1.0
    assert effective_data(2, 1e6) == pytest.approx(2.0, rel=1e-5)  # no decay: fresh
    assert effective_data(1e6, 3.0) == pytest.approx(4.0)  # U (1 + R*)


def test_the_fresh_curve_is_recovered_from_its_points():
    fit = fit_fresh(MULTIPLES, LAW.loss(MULTIPLES))
    assert (fit.E, fit.B, fit.beta) == pytest.approx((2.0, 1.5, 0.4), rel=1e-4)
    assert fit.rms < 1e-8
    with pytest.raises(ValueError, match="3 or more pool sizes"):
        fit_fresh(MULTIPLES[:2], LAW.loss(MULTIPLES[:2]))


@pytest.mark.parametrize("r_star", [0.3, 2.0, 15.4, 200.0])
def test_a_known_r_star_is_recovered_from_its_loss_curve(r_star):
    losses = LAW.loss(effective_data(EPOCHS, r_star))
    fit = fit_r_star(LAW, EPOCHS, losses)
    assert fit.bound == "inside"
    assert fit.r_star == pytest.approx(r_star, rel=0.01)  # the grid's step: 0.5%


def test_an_r_star_beyond_the_grid_is_a_bound():
    fresh_pace = LAW.loss(EPOCHS.astype(float))  # repeated tokens worth as much as fresh ones
    assert fit_r_star(LAW, EPOCHS, fresh_pace).bound == "above"
    flat = np.full(len(EPOCHS), LAW.loss(1.0))  # the second epoch added nothing
    assert fit_r_star(LAW, EPOCHS, flat).bound == "below"


def _study(r_stars: dict[int, list[float]], noise: float = 0.0, seed: int = 0):
    """Hand-made fresh points and budget losses: per batch and pool, the law LAW with that pool's
    R_D* (plus Gaussian loss noise, nats/token)."""
    rng = np.random.default_rng(seed)
    fresh, budgets = [], []
    for batch, values in r_stars.items():
        for pool, r_star in zip(POOLS, values):
            for m, loss in zip(MULTIPLES, LAW.loss(MULTIPLES)):
                fresh.append({"pool": pool, "batch_size": batch, "multiple": m, "val_loss": loss})
            losses = LAW.loss(effective_data(EPOCHS, r_star)) + noise * rng.standard_normal(6)
            for e, loss in zip(EPOCHS, losses):
                row = {"pool": pool, "batch_size": batch, "epochs": e, "val_loss": loss}
                row["steps_per_epoch"] = 100 / batch
                budgets.append(row)
    return pd.DataFrame(fresh), pd.DataFrame(budgets)


def test_the_table_fits_each_pool_and_batch_and_summarises_over_pools():
    fresh, budgets = _study({1: [8.0, 10.0, 12.0], 32: [1.0, 1.5, 2.0]})
    fits = r_star_table(fresh, budgets, "batch_size")
    assert len(fits) == 6 and (fits["bound"] == "inside").all()
    assert fits["steps at the largest budget"].tolist() == pytest.approx([3200] * 3 + [100] * 3)
    reach = 1 + fits["r_star"] * (1 - np.exp(-31 / fits["r_star"]))  # D'/U at 32 epochs
    assert (fits["extrapolated"] == (reach > MULTIPLES.max())).all()
    assert fits["r_star"].tolist() == pytest.approx([8, 10, 12, 1, 1.5, 2], rel=0.01)
    summary = r_star_summary(fits, "batch_size").set_index("batch_size")
    geometric = np.exp(np.log([8.0, 10.0, 12.0]).mean())
    assert summary.loc[1, "R_D*"] == pytest.approx(geometric, rel=0.01)
    assert summary.loc[1, "low"] < geometric < summary.loc[1, "high"]


@pytest.mark.parametrize(
    "small, large, verdict",
    [
        ([8.0, 10.0, 12.0], [1.0, 1.5, 2.0], "agrees"),  # smaller batch, larger R*
        ([1.0, 1.5, 2.0], [8.0, 10.0, 12.0], "disagrees"),
        ([2.0, 10.0, 1.0], [3.0, 2.0, 6.0], "undetermined"),
    ],
)
def test_the_r_star_claim_decides_in_all_three_directions(small, large, verdict):
    fits = r_star_table(*_study({1: small, 32: large}), "batch_size")
    claim = r_star_claim(fits)
    assert claim.verdict == verdict
    assert claim.difference.per_replicate == pytest.approx(
        list(np.log10(small) - np.log10(large)), abs=0.01
    )


def test_a_batch_whose_r_star_is_not_measured_is_left_out_of_the_claim():
    """Batch 64 keeps the fresh pace (R_D* at the grid's top): the claim compares batch 1 with
    batch 32, the largest measured; with batch 32 also out, it is undetermined."""
    fresh, budgets = _study({1: [8.0, 10.0, 12.0], 32: [1.0, 1.5, 2.0], 64: [1e6] * 3})
    fits = r_star_table(fresh, budgets, "batch_size")
    assert (fits[fits["batch_size"] == 64]["bound"] == "above").all()
    claim = r_star_claim(fits)
    assert claim.verdict == "agrees" and "batch 1 - batch 32" in claim.measured
    assert "left out: batch 64, 3 of 3 at the grid's bound" in claim.measured
    alone = r_star_claim(fits[fits["batch_size"] != 32])
    assert alone.verdict == "undetermined" and alone.difference is None
    short = r_star_table(fresh[fresh["multiple"] <= 4], budgets, "batch_size")
    assert short[short["batch_size"] == 1]["extrapolated"].all()  # D' at 32 epochs above 4 x U


def test_the_r_star_claim_is_calibrated_over_simulated_studies():
    """3 pools per study, each pool's log10 R_D* drawn around its batch's (sd 0.15) and the losses
    measured with noise: no true difference gives a definite verdict at most 10% (+3%) of the
    time; a known one is covered by the 90% interval at least 87% of the time (the fit recovers
    each R_D* with error small beside the spread between pools)."""
    rng = np.random.default_rng(5)
    definite, covered, trials = 0, 0, 400
    for trial in range(trials):
        effect = 0.0 if trial % 2 == 0 else 0.5  # log10 R*(small) - log10 R*(large)
        base = 10 ** (0.6 + 0.15 * rng.standard_normal(3))
        small = base * 10 ** (effect + 0.15 * rng.standard_normal(3))
        large = base * 10 ** (0.15 * rng.standard_normal(3))
        budgets = []
        for batch, values in {1: small, 32: large}.items():
            for pool, r_star in zip(POOLS, values):
                measured = LAW.loss(effective_data(EPOCHS, r_star)) + 0.002 * rng.standard_normal(6)
                r = fit_r_star(LAW, EPOCHS, measured)
                budgets.append({"batch_size": batch, "pool": pool, "r_star": r.r_star})
        fits = pd.DataFrame(budgets).assign(bound="inside", extrapolated=False)
        claim = r_star_claim(fits)
        if effect == 0.0:
            definite += claim.verdict != "undetermined"
        else:
            covered += claim.difference.low <= effect <= claim.difference.high
    assert definite / (trials / 2) <= 0.10 + 0.03
    assert covered / (trials / 2) >= 0.87
    assert R_GRID[0] < 1 < R_GRID[-1]


def test_the_spread_title_ranks_the_fitted_values_and_names_those_at_the_grids_bound():
    summary = pd.DataFrame(
        {"batch_size": [1, 16, 32], "R_D*": [5.5, 16.2, 1000.0], "at a bound": [0, 0, 2]}
    )
    title = spread_title(summary, "batch_size", "batch")
    assert title == (
        "R_D* from 5.5 (batch 1) to 16.2 (batch 16)\n"
        "batch 32: a replicate at the grid's bound, not ranked"
    )
    assert "\n" not in spread_title(summary.iloc[:2], "batch_size", "batch")
