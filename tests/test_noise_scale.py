"""The gradient noise-scale estimators (repro.runtime.noise_scale) on problems with known gradient
covariance; notebook 05's noise-scale runs on every pool, B_simple's growth per pool and its claim
over pools in all three directions (agrees, disagrees, undetermined)."""

import numpy as np
import pandas as pd
import pytest
import torch

from repro.analysis.batch_schedules import ScheduleComparison
from repro.analysis.cbs_claims import cbs_claims
from repro.analysis.intervals import NOT_MEASURED
from repro.analysis.noise import (
    NOISE_RUN_FIELDS,
    noise_growth,
    noise_scale_choices,
    noise_trajectory,
)
from repro.analysis.results import MemoryDocuments, Results
from repro.design.grids import noise_scale_grid
from repro.design.preset_files import PRESETS
from repro.design.presets import changed
from repro.errors import ReproError
from repro.runtime.noise_scale import MicroBatchNorms, NoiseScaleEMA, two_batch_estimates
from repro.store.grid import expand


def test_b_simple_of_linear_regression_matches_the_analytic_value():
    """Loss 1/2 (x.w - y)^2, x ~ N(0, I_d), y = x.w* + N(0, s^2): per-example gradient
    x (x.delta - eps) with delta = w - w*, so |G|^2 = |delta|^2 and
    tr(Sigma) = (d + 1)|delta|^2 + s^2 d."""
    torch.manual_seed(0)
    d, noise, micro, n_micro = 8, 0.5, 4, 8
    w_star = torch.randn(d)
    w = torch.nn.Parameter(w_star + 0.3 * torch.randn(d))
    delta_sq = (w.detach() - w_star).pow(2).sum().item()
    expected = ((d + 1) * delta_sq + noise**2 * d) / delta_sq
    ema = NoiseScaleEMA(decay=0.999)
    for _ in range(3000):
        norms = MicroBatchNorms(stacked=False)
        for _ in range(n_micro):
            x = torch.randn(micro, d)
            y = x @ w_star + noise * torch.randn(micro)
            (0.5 * (x @ w - y).pow(2).mean() / n_micro).backward()
            norms.add([w], n_micro)
        small_sq = norms.restore([w])
        ema.update(small_sq.item(), w.grad.pow(2).sum().item(), micro, micro * n_micro)
        w.grad = None
    values = ema.values()
    assert values["grad_sq"] == pytest.approx(delta_sq, rel=0.15)
    assert values["b_simple"] == pytest.approx(expected, rel=0.15)
    assert not values["b_simple"] == pytest.approx(d + 1, rel=0.15)  # the noise term matters here


def test_two_batch_estimates_are_exact_on_expected_norms():
    g2, trace = 2.0, 30.0
    small, big = g2 + trace / 4, g2 + trace / 32
    assert two_batch_estimates(small, big, 4, 32) == pytest.approx((g2, trace))


# --- notebook 05: the noise-scale runs on every pool, and their claim over pools ----------------


def test_noise_scale_runs_take_each_pools_tuned_run(hand_made):
    """Batch 8 is best at lr 3e-3 for 4 epochs on p0 and at lr 1e-3 for 8 epochs on p1 (a WSD
    branch: warmup_steps 18, from a trunk's checkpoint); on p2 every batch-8 run diverged: no
    choice. Batch 4 is not a noise-scale batch. Each run copies its tuned run's fields but trains
    from scratch with the noise-scale micro-batch, evaluated 4x per epoch."""
    tiny = {"model": "tiny", "seq_len": 16, "schedule": "wsd", "warmup_steps": 0}
    branch = {"warmup_steps": 18, "init_from": "trunk/checkpoints/step-9.pt", "save_steps": ""}
    hand_made.add(2.8, pool="p0", batch_size=8, lr=3e-3, **tiny)
    hand_made.add(3.0, pool="p0", batch_size=8, lr=1e-3, **tiny)
    hand_made.add(2.5, pool="p0", batch_size=4, lr=1e-3, **tiny)
    hand_made.add(2.9, pool="p1", batch_size=8, lr=3e-3, **tiny)
    hand_made.add(2.7, pool="p1", batch_size=8, lr=1e-3, epochs=8, **tiny | branch)
    hand_made.add(2.0, pool="p2", batch_size=8, status="diverged", **tiny)
    choices = noise_scale_choices(hand_made.results(), [8])
    assert [(c["pool"], c["lr"], c["epochs"], c["warmup_steps"]) for c in choices] == [
        ("p0", 3e-3, 4, 0),
        ("p1", 1e-3, 8, 18),
    ]
    assert not any(set(c) & set(NOISE_RUN_FIELDS) for c in choices)
    smoke = PRESETS["smoke"]
    runs = [c for grid in noise_scale_grid(smoke, choices) for c in expand(grid)]
    assert [(c.pool, c.lr, c.epochs, c.warmup_steps, c.init_from) for c in runs] == [
        ("p0", 3e-3, 4, 0, ""),
        ("p1", 1e-3, 8, 18, ""),
    ]
    assert all(c.noise_scale and c.micro_batch == 2 and c.eval_every == 0.25 for c in runs)
    assert {c.adam_beta2 for c in runs} == {0.95}  # copied (the hand-made runs have none)
    assert noise_scale_choices(hand_made.results(), [8]) == []
    with pytest.raises(
        ReproError, match="noise_scale_batches: batch size 3 is not one of grid.batch_sizes"
    ):
        changed(smoke, critical_batch={"noise_scale_batches": (3,)})


def _trajectory(b_simple, losses=None, batch=8, pool="p0") -> pd.DataFrame:
    """A noise-scale run's evaluations: B_simple and val loss (default: falling) per evaluation."""
    n = len(b_simple)
    losses = np.linspace(3.0, 2.0, n) if losses is None else losses
    return pd.DataFrame(
        {
            "pool": pool,
            "batch_size": batch,
            "epoch": np.arange(1, n + 1) / 4,
            "tokens": np.arange(1, n + 1) * 1000,
            "val_loss": losses,
            "b_simple": b_simple,
        }
    )


def test_noise_trajectory_orders_by_pool_batch_then_tokens():
    runs = pd.DataFrame({"run_id": ["a", "b", "c"], "batch_size": [32, 8, 8], "pool": "p0"})
    runs.loc[2, "pool"] = "p1"
    evals = pd.DataFrame(
        {
            "run_id": ["a", "b", "b", "c"],
            "epoch": [1.0, 2.0, 1.0, 1.0],
            "tokens": [100, 200, 100, 100],
            "val_loss": [3.0, 2.0, 2.5, 2.9],
            "b_simple": [1.0, 4.0, 2.0, 7.0],
        }
    )
    out = noise_trajectory(Results(runs, evals, MemoryDocuments({})))
    assert out[["pool", "batch_size", "b_simple"]].values.tolist() == [
        ["p0", 8, 2.0],
        ["p0", 8, 4.0],
        ["p0", 32, 1.0],
        ["p1", 8, 7.0],
    ]


def test_noise_growth_is_per_pool_and_stops_at_the_best_val_loss():
    # loss falls over the first 6 evaluations, then rises: B_simple after that is not counted
    losses = [3.0, 2.8, 2.6, 2.4, 2.2, 2.0, 2.1, 2.3]
    rising = _trajectory([1, 1, 2, 2, 4, 4, 100, 100], losses)
    growth = noise_growth(pd.concat([rising, rising.assign(pool="p1", b_simple=2.0)]))
    assert growth["pool"].tolist() == ["p0", "p1"]
    row = growth.iloc[0]
    assert row["evaluations"] == 6 and row["ratio"] == pytest.approx(4.0)
    assert (row["val loss first"], row["val loss last"]) == (3.0, 2.0)
    assert growth.loc[1, "ratio"] == pytest.approx(1.0)


def _claim(*runs: pd.DataFrame) -> pd.Series:
    """The noise-scale claim of cbs_claims on `runs` (trajectories), nothing else measured."""
    growth = noise_growth(pd.concat(runs, ignore_index=True))
    nothing = ScheduleComparison(pd.DataFrame(), pd.DataFrame(), NOT_MEASURED, "")
    claims = cbs_claims(growth, pd.DataFrame(), pd.DataFrame(), {}, nothing, "wsd", "tiny")
    return claims.iloc[0]


RISING = [1.0, 1.2, 2.0, 2.5, 3.0, 3.5]  # x3 while the loss falls
FALLING = [3.0, 2.8, 2.5, 2.0, 1.5, 1.0]


def _pools(*series, batch=8) -> list[pd.DataFrame]:
    """One trajectory per pool (p0, p1, ...) of batch `batch`, B_simple from `series`."""
    return [_trajectory(b, batch=batch, pool=f"p{i}") for i, b in enumerate(series)]


@pytest.mark.parametrize(
    "runs,verdict,why",
    [
        (
            _pools(RISING, [1.0, 1.3, 2.0, 2.6, 3.1, 3.3], [1.1, 1.2, 2.2, 2.4, 3.0, 3.6]),
            "agrees",
            "",
        ),
        (_pools(FALLING, FALLING, FALLING), "disagrees", ""),
        (_pools(*[[1.0, 1.0, 1.1, 1.1, 1.2, 1.2]] * 3), "undetermined", "below x1.5"),  # x1.2
        (_pools(RISING, RISING, FALLING), "undetermined", "below x1.5"),  # one pool contradicts
        (_pools(FALLING, FALLING, RISING), "undetermined", "below x1.5"),  # mean growth below 1
        (_pools(RISING, RISING), "undetermined", "on fewer than 3 pools"),
        (_pools([1.0], [1.0], [1.0]), "undetermined", "not finite on every pool"),  # 1 evaluation
        (  # the first third's median B_simple is negative on every pool: a failed fit
            _pools(*[[-0.5, -0.2, 0.1, 0.5, 1.0, 2.0]] * 3),
            "undetermined",
            "batch 8: fit failed: B_simple < 0 (first third) on p0, p1, p2; batch 8's growth not "
            "finite on every pool",
        ),
        (_pools(RISING, RISING, RISING) + _pools(*[FALLING] * 3, batch=32), "disagrees", ""),
    ],
)
def test_noise_scale_claim_reads_the_growth_interval_over_pools(runs, verdict, why):
    claim = _claim(*runs)
    measured = claim["measured here"]
    assert claim["agrees?"] == verdict and why in measured
    if "fit failed" in why:  # named as failed, never given as a number
        assert "batch 8 " not in measured and "(replicates " not in measured
    else:
        assert "batch 8 " in measured and "(replicates " in measured
