"""Paired document bootstrap and three-way verdicts, on hand-made losses."""

import numpy as np
import pytest

from repro.analysis.intervals import (
    Difference,
    describe,
    document_losses,
    lower_verdict,
    normal_difference,
    paired_difference,
)
from repro.errors import ReproError

TOKENS = np.full(40, 100)


def _losses(mean: float, spread: float, seed: int) -> np.ndarray:
    return (mean + spread * np.random.default_rng(seed).standard_normal(40)) * TOKENS


@pytest.mark.parametrize(
    "shift,verdict",
    [(-0.05, "agrees"), (+0.05, "disagrees"), (-0.0005, "undetermined")],
)
def test_paired_difference_and_verdict_in_all_three_directions(shift, verdict):
    base = _losses(3.0, 0.3, 0)  # documents differ a lot; the paired shift is what counts
    noise = 0.01 * np.random.default_rng(1).standard_normal(40) * TOKENS
    other = base + shift * TOKENS + noise
    diff = paired_difference(other, base, TOKENS)
    assert diff[1] <= diff[0] <= diff[2] and diff[0] == pytest.approx(shift, abs=0.005)
    assert lower_verdict([diff]) == verdict


def test_one_contradicting_comparison_disagrees_and_one_open_one_is_undetermined():
    below, above = Difference(-0.1, -0.2, -0.05), Difference(0.1, 0.05, 0.2)
    open_ = Difference(-0.01, -0.05, 0.03)
    assert lower_verdict([below, above]) == "disagrees"
    assert lower_verdict([below, open_]) == "undetermined"
    assert lower_verdict([below, below]) == "agrees"
    assert describe("a - b", below) == "a - b -0.100 [-0.200, -0.050]"


def test_unpaired_inputs_and_missing_files_are_one_line_errors(tmp_path):
    with pytest.raises(ReproError, match="same validation documents"):
        paired_difference(TOKENS[:3] * 1.0, TOKENS * 1.0, TOKENS)
    with pytest.raises(ReproError, match="trained before per-document losses"):
        document_losses(tmp_path, 10)


def test_too_few_documents_give_no_interval_and_no_verdict():
    few = np.full(3, 100)
    diff = paired_difference(few * 3.0, few * 3.5, few)
    assert diff == Difference(-0.5, -np.inf, np.inf) and lower_verdict([diff]) == "undetermined"
    assert describe("a - b", diff) == "a - b -0.500 [no interval]"


def test_pools_that_disagree_in_sign_leave_the_verdict_undetermined():
    consistent = Difference(-0.1, -0.2, -0.05, (-0.12, -0.08))
    split = Difference(-0.1, -0.2, -0.05, (-0.25, 0.05))
    assert lower_verdict([consistent]) == "agrees"
    assert lower_verdict([split]) == "undetermined"
    assert lower_verdict([split.negated()]) == "undetermined"
    assert lower_verdict([consistent.negated()]) == "disagrees"
    assert describe("a - b", consistent) == "a - b -0.100 [-0.200, -0.050] (pools -0.120, -0.080)"


def test_normal_difference_widens_with_the_bonferroni_level():
    rng = np.random.default_rng(0)
    a = (3.0 + rng.normal(0, 0.1, 40)) * TOKENS
    b = a - (0.05 + rng.normal(0, 0.02, 40)) * TOKENS
    narrow, wide = normal_difference(a, b, TOKENS, 0.9), normal_difference(a, b, TOKENS, 0.999)
    assert wide.value == narrow.value == pytest.approx((a - b).sum() / TOKENS.sum())
    assert wide.low < narrow.low < narrow.value < narrow.high < wide.high
    # at the plain level it is close to the paired bootstrap interval
    boot = paired_difference(a, b, TOKENS)
    assert narrow.high - narrow.low == pytest.approx(boot.high - boot.low, rel=0.2)
    few = normal_difference(a[:5], b[:5], TOKENS[:5], 0.9)
    assert np.isinf(few.low) and np.isinf(few.high)
    with pytest.raises(ReproError):
        normal_difference(a, b[:5], TOKENS, 0.9)


def test_a_censored_arm_cannot_be_the_one_found_worse():
    """An arm whose best epoch budget is the largest tried might still improve."""
    better = Difference(-0.1, -0.2, -0.05, (-0.1,), censored=(False, True))
    assert lower_verdict([better]) == "undetermined"  # the worse arm might catch up
    assert lower_verdict([better._replace(censored=(True, False))]) == "agrees"
    worse = Difference(0.1, 0.05, 0.2, (0.1,), censored=(True, False))
    assert lower_verdict([worse]) == "undetermined"
    assert lower_verdict([worse.negated()]) == "undetermined"  # negated: the second arm
    assert describe("a - b", better).endswith("(censored: second arm)")
