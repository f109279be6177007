"""A fitted quantity outside its physical range (a negative B_min, a negative noise scale) is
reported as a failed fit, never as a number, and its claim is undetermined (cbs.physical_range)."""

import numpy as np
import pandas as pd

from repro.analysis.cbs import FAILED, fit_targets
from repro.analysis.cbs_claims import _wsd_claim
from repro.analysis.noise import noise_growth

BATCHES = [1, 2, 4, 8]


def _reach(steps: list[float], pools=("pool-seed0", "pool-seed1", "pool-seed2")) -> pd.DataFrame:
    """steps_to_target rows: one target, the same crossing steps on every pool."""
    rows = [
        {
            "pool": pool,
            "batch_size": b,
            "target": 3.0,
            "steps": int(np.ceil(s)),
            "previous step": int(s / 2),
            "crossing step": s * (1 + 0.01 * i),
            "left-censored": False,
        }
        for i, pool in enumerate(pools)
        for b, s in zip(BATCHES, steps)
    ]
    return pd.DataFrame(rows)


NO_NOISE = pd.DataFrame(columns=["pool", "batch_size", "tokens", "val_loss", "b_simple"])


def test_a_negative_b_min_is_a_failed_fit_and_undetermined():
    # tokens (S * B) still fall from batch 2 to batch 1: the tail's slope B_min is negative
    fits, _ = fit_targets(_reach([100.0, 80.0, 50.0, 40.0]), NO_NOISE)
    assert fits["B_min"].isna().all()
    assert (fits[FAILED] == "B_min < 0").all()
    claim = _wsd_claim(fits, "wsd", "tiny")
    assert claim.verdict == "undetermined"
    assert "fit failed: B_min < 0 on" in claim.measured
    assert "B_min -" not in claim.measured  # never as a number


def test_a_positive_b_min_is_reported_as_a_number():
    # tokens rise from batch 2 to batch 1 (400 -> 640): B_min = (640 - 400) / (640 - 200) > 0
    fits, _ = fit_targets(_reach([640.0, 200.0, 60.0, 40.0]), NO_NOISE)
    assert (fits["B_min"] > 0).all()
    assert (fits[FAILED] == "").all()
    claim = _wsd_claim(fits, "wsd", "tiny")
    assert "fit failed" not in claim.measured
    assert "B_min 0.5" in claim.measured


def test_a_negative_noise_scale_is_a_failed_fit():
    trajectory = pd.DataFrame(
        {
            "pool": "p",
            "batch_size": 8,
            "tokens": [1, 2, 3, 4, 5, 6],
            "val_loss": [6.0, 5.0, 4.0, 3.5, 3.2, 3.0],
            "b_simple": [-2.0, -1.0, -3.0, 4.0, 5.0, 6.0],
        }
    )
    growth = noise_growth(trajectory).iloc[0]
    assert np.isnan(growth["B_simple first"]) and np.isnan(growth["ratio"])
    assert growth["B_simple last"] == 5.5  # median of the last third
    assert growth[FAILED] == "B_simple < 0 (first third)"
