"""Intervals over replicates and documents, and three-way verdicts, on hand-made losses."""

import numpy as np
import pytest
from scipy import stats

from repro.analysis.intervals import (
    CLAIM_NUMBERS,
    Claim,
    Difference,
    claim_count,
    claim_summary,
    claim_table,
    describe,
    effective_documents,
    hinge,
    lower_verdict,
    paired_difference,
    replicate_difference,
    t_interval,
)
from repro.analysis.results import StoreDocuments
from repro.errors import ReproError

TOKENS = np.full(40, 100)


def _gaps(shift: float, replicate_sd: float, seed: int, replicates: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    per_token = (
        shift
        + replicate_sd * rng.standard_normal((replicates, 1))
        + 0.01 * rng.standard_normal((replicates, 40))
    )
    return per_token * TOKENS


@pytest.mark.parametrize(
    "shift,verdict",
    [(-0.05, "agrees"), (+0.05, "disagrees"), (-0.0005, "undetermined")],
)
def test_replicate_difference_and_verdict_in_all_three_directions(shift, verdict):
    diff = replicate_difference(_gaps(shift, 0.002, 0), TOKENS)
    assert diff.low <= diff.value <= diff.high and diff.value == pytest.approx(shift, abs=0.005)
    assert len(diff.per_replicate) == 3
    assert lower_verdict([diff]) == verdict


def test_replicates_that_disagree_widen_the_interval_past_zero():
    """Pools +0.06 and -0.06 apart around a small mean: the documents alone would call it, the
    replicate spread does not (the rule before counted documents only)."""
    gaps = np.stack([g * TOKENS for g in (0.06, -0.05, 0.01)]) + 0.001 * TOKENS
    diff = replicate_difference(gaps, TOKENS)
    assert diff.low < 0 < diff.high and lower_verdict([diff]) == "undetermined"
    one = paired_difference(gaps.mean(0), np.zeros(40), TOKENS)
    assert one.high - one.low < 0.001  # a single replicate: documents only, very narrow


def test_fewer_than_three_replicates_give_no_verdict():
    two = replicate_difference(_gaps(-0.05, 0.002, 1, replicates=2), TOKENS)
    assert two.high < 0 and lower_verdict([two]) == "undetermined"
    assert describe("a - b", two).endswith("(2 of 3 replicates: no verdict)")


def test_empty_and_unmeasured_comparisons_are_undetermined():
    assert lower_verdict([]) == "undetermined"
    assert lower_verdict([Difference(np.nan, -np.inf, np.inf)]) == "undetermined"
    assert describe("a - b", Difference(np.nan, -np.inf, np.inf)) == "a - b: not measured"


def test_one_contradicting_comparison_disagrees_and_one_open_one_is_undetermined():
    reps = (-0.1, -0.1, -0.1)
    below, above = Difference(-0.1, -0.2, -0.05, reps), Difference(0.1, 0.05, 0.2, reps)
    open_ = Difference(-0.01, -0.05, 0.03, reps)
    assert lower_verdict([below, above]) == "disagrees"
    assert lower_verdict([below, open_]) == "undetermined"
    assert lower_verdict([below, below]) == "agrees"
    assert describe("a - b", below) == "a - b -0.100 [-0.200, -0.050] (replicates -0.100, " + (
        "-0.100, -0.100)"
    )


def test_unpaired_inputs_and_missing_files_are_one_line_errors(tmp_path):
    with pytest.raises(ReproError, match="same validation documents"):
        paired_difference(TOKENS[:3] * 1.0, TOKENS * 1.0, TOKENS)
    with pytest.raises(ReproError, match="missing .deleted, or the run predates per-document"):
        StoreDocuments(tmp_path)("run", 10)
    (tmp_path / "bad" / "val_docs").mkdir(parents=True)
    (tmp_path / "bad" / "val_docs" / "step-10.npy").write_bytes(b"garbage")
    with pytest.raises(ReproError, match="bad/val_docs is damaged"):
        StoreDocuments(tmp_path)("bad", 10)


def test_too_few_documents_give_no_interval_and_no_verdict():
    few = np.full(3, 100)
    diff = paired_difference(few * 3.0, few * 3.5, few)
    assert diff.value == -0.5 and np.isinf(diff.low) and lower_verdict([diff]) == "undetermined"
    assert describe("a - b", diff).startswith("a - b -0.500 [no interval]")


def test_uneven_documents_count_by_their_effective_number():
    assert effective_documents(np.full(10, 50)) == pytest.approx(10)
    assert effective_documents(np.array([1000, 1, 1, 1])) == pytest.approx(1.006, abs=1e-3)


def test_a_higher_bonferroni_level_widens_the_t_interval():
    rng = np.random.default_rng(0)
    a = (3.0 + rng.normal(0, 0.1, 40)) * TOKENS
    b = a - (0.05 + rng.normal(0, 0.02, 40)) * TOKENS
    narrow, wide = paired_difference(a, b, TOKENS, 0.9), paired_difference(a, b, TOKENS, 0.999)
    assert wide.value == narrow.value == pytest.approx((a - b).sum() / TOKENS.sum())
    assert wide.low < narrow.low < narrow.value < narrow.high < wide.high


def test_t_interval_over_replicates():
    diff = t_interval([0.1, 0.2, 0.3])
    half = 2.919986 * 0.1 / np.sqrt(3)  # t(0.95, 2) * sd / sqrt(n)
    assert diff.value == pytest.approx(0.2) and diff.high == pytest.approx(0.2 + half)
    assert np.isinf(t_interval([0.1]).low) and np.isnan(t_interval([]).value)


def test_a_censored_arm_cannot_be_the_one_found_worse():
    """An arm whose best epoch budget is the largest tried might still improve."""
    reps = (-0.1, -0.1, -0.1)
    better = Difference(-0.1, -0.2, -0.05, reps, censored=(False, True))
    assert lower_verdict([better]) == "undetermined"  # the worse arm might catch up
    assert lower_verdict([better._replace(censored=(True, False))]) == "agrees"
    worse = Difference(0.1, 0.05, 0.2, tuple(-r for r in reps), censored=(True, False))
    assert lower_verdict([worse]) == "undetermined"
    assert lower_verdict([worse.negated()]) == "undetermined"  # negated: the second arm
    assert describe("a - b", better).endswith("(censored: second arm)")


def test_held_out_replicates_widen_the_replicate_term():
    """Values chosen on each other covary: the replicate term grows by (1/R + 1/(R-1)) / (1/R),
    2.5 at R = 3 (documents here add almost nothing)."""
    gaps = np.stack([g * TOKENS for g in (0.10, 0.05, 0.15)]).astype(float)
    plain, held = (
        replicate_difference(gaps, TOKENS),
        replicate_difference(gaps, TOKENS, held_out=True),
    )
    assert plain.value == held.value
    ratio = (held.high - held.low) / (plain.high - plain.low)
    assert ratio == pytest.approx(np.sqrt(2.5), rel=0.01)


def test_describe_formats_numbers_and_keeps_the_replicates_of_an_undetermined_value():
    ratio = Difference(20.0, 10.0, 40.0, (10.0, 20.0, 40.0))
    assert describe("B", ratio, ".3g") == "B 20 [10, 40] (replicates 10, 20, 40)"
    open_ = Difference(np.nan, -np.inf, np.inf, (1.0, np.nan, 2.0))
    assert describe("B", open_, ".3g") == "B not determined [no interval] (replicates 1, nan, 2)"


def test_a_claim_summary_has_a_sentence_per_claim_in_each_direction():
    """Generated from the claim tables (no hand-written figure): the counts, then each claim."""
    table = claim_table(
        [
            Claim("a", "A is lower", "yes", "A - B -0.2 [-0.3, -0.1]", "agrees"),
            Claim("c", "C is lower", "yes", "C - D +0.2 [+0.1, +0.3]", "disagrees"),
        ]
    )
    other = claim_table([Claim("e", "E is lower", "yes", "not measured", "undetermined")])
    assert claim_summary("cpu", [table, other]).splitlines() == [
        "**What preset cpu showed.** 3 claims tested, 2 decided: 1 agrees, 1 disagrees, 1 "
        "undetermined.",
        "",
        "- The data agree: A is lower. Measured: A - B -0.2 [-0.3, -0.1].",
        "- The data disagree: C is lower. Measured: C - D +0.2 [+0.1, +0.3].",
        "- Not decided: E is lower. Measured: not measured.",
    ]


def test_the_mde_is_the_t_quantiles_times_the_standard_error():
    """Three replicates (2 degrees of freedom): the standard error is sd / sqrt(3), the mde
    (t(0.95, 2) + t(0.8, 2)) times it; no interval, no mde."""
    diff = t_interval([0.1, 0.2, 0.3])
    se = 0.1 / np.sqrt(3)
    assert diff.df == 2 and diff.standard_error == pytest.approx(se)
    assert diff.mde == pytest.approx((2.919986 + 1.060660) * se, rel=1e-6)
    assert np.isnan(t_interval([0.1]).mde) and np.isnan(Difference(0.1, 0.0, 0.2).mde)


def test_replicates_needed_is_the_fewest_with_power_at_the_observed_effect():
    """A t interval over 3 replicates that covers 0: the fewest replicates m whose interval (the
    same spread, m - 1 degrees of freedom) would exclude 0 with 80% power at the observed mean;
    none where the interval already excludes 0."""
    values = [0.03, -0.01, 0.02]
    diff = t_interval(values)
    assert diff.low < 0 < diff.high
    m = int(diff.replicates_needed())
    sd = np.std(values, ddof=1)

    def mde(n: int) -> float:
        return (stats.t.ppf(0.95, n - 1) + stats.t.ppf(0.8, n - 1)) * sd / np.sqrt(n)

    assert mde(m) <= diff.value < mde(m - 1)
    assert m <= np.ceil(3 * (diff.mde / diff.value) ** 2)  # t quantiles shrink as m grows
    assert np.isnan(t_interval([0.3, 0.31, 0.32]).replicates_needed())
    assert diff.replicates_needed(threshold=diff.value) != diff.replicates_needed()


def test_a_claim_rows_numbers_are_its_differences():
    """The numeric columns are the hinge difference's: value, interval, level, n and mde, and
    pools_needed only where the claim is undetermined; a claim without a difference has none."""
    diff = replicate_difference(_gaps(-0.0005, 0.002, 0), TOKENS)
    decided = replicate_difference(_gaps(-0.05, 0.002, 0), TOKENS)
    table = claim_table(
        [
            Claim("open", "A is lower", "yes", describe("a - b", diff), "undetermined", diff),
            Claim("decided", "C is lower", "yes", "...", "agrees", decided),
            Claim("count", "E holds", "yes", "exact", "agrees"),
        ]
    )
    row = table.loc["open"]
    expected = [diff.value, diff.low, diff.high, diff.level, 3, diff.mde]
    assert row[CLAIM_NUMBERS[:-1]].tolist() == expected
    assert row["pools_needed"] == diff.replicates_needed() > 3
    assert table.loc["decided", "mde"] == decided.mde and np.isnan(
        table.loc["decided", "pools_needed"]
    )
    assert table.loc["count", CLAIM_NUMBERS].isna().all()
    assert claim_count(table) == "3 claims tested, 2 decided: 2 agree, 0 disagree, 1 undetermined"


def test_the_difference_a_verdict_hinges_on():
    """Of several differences: one that is not decisive (no verdict then), else the clearest that
    contradicts the claim (its first arm not censored), else the least clear (|value| / width)."""
    reps = (-0.1, -0.1, -0.1)
    clear, faint = Difference(-0.1, -0.2, -0.05, reps), Difference(-0.02, -0.045, -0.005, reps)
    against, open_ = Difference(0.1, 0.05, 0.2, reps), Difference(-0.1, -0.2, -0.05, reps[:2])
    assert hinge([clear, faint]) is faint
    assert hinge([faint, against]) is against
    assert hinge([clear, open_, against]) is open_
    assert hinge([faint, against._replace(censored=(True, False))]) is faint
    assert hinge([]) is None
