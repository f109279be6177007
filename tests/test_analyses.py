"""Claim logic of notebooks 01-03 on hand-made results, each claim in all three directions,
including the cases a review found wrongly judged."""

import numpy as np
import pandas as pd
import pytest

from repro.analysis.analyses import (
    PAIR_LEVEL,
    arm,
    batch_differences,
    batch_endpoints,
    batch_sweep_claims,
    little_verdict,
    optimal_batches,
    recipe_claims,
)
from repro.analysis.intervals import Difference
from repro.analysis.pools import pool_claims
from repro.analysis.selection import compare, tuned

POOLS = ("p0", "p1", "p2")
CAP = 32  # epochs: the study's cap, above every budget tried here


def _batch_sweep(hand_made, val: dict, train: dict, pools=POOLS, noise=0.005):
    """One run per pool and batch with val loss val[batch] (or val[batch][pool index])."""
    for i, pool in enumerate(pools):
        for batch, loss in val.items():
            loss = loss[i] if isinstance(loss, tuple) else loss
            hand_made.add(loss, train[batch], noise, pool=pool, batch_size=batch)
    return hand_made.results()


def _claims(hand_made, val, train, usual=16, noise=0.005):
    results = _batch_sweep(hand_made, val, train, noise=noise)
    table = batch_sweep_claims(results, ["m"], dict.fromkeys(POOLS, usual), "set", cap=CAP)
    return table["agrees?"].rename(lambda key: key.removesuffix("/m")).to_dict()


U_SHAPE, SMALLER = "u-shape", "smaller-wins"
OVERFIT, LARGE = "smallest-overfits", "largest-overfits"


def test_batch_differences_are_each_batch_minus_the_optimum_with_intervals(hand_made):
    results = _batch_sweep(hand_made, {1: 3.10, 4: 3.00, 16: 3.25}, {1: 2.0, 4: 2.5, 16: 2.8})
    table = batch_differences(results, ["m"]).set_index("batch_size")
    assert table["difference"].round(2).to_dict() == {1: 0.1, 4: 0.0, 16: 0.25}
    inside = (table["low"] <= table["difference"]) & (table["difference"] <= table["high"])
    assert inside.all()
    assert table.loc[16, "low"] > 0.2 and table.loc[4, "high"] < 0.01  # documents' noise 0.005
    assert (table["replicates"] == len(POOLS)).all()


def test_u_shape_with_an_overfitting_smallest_batch_agrees(hand_made):
    claims = _claims(hand_made, {1: 3.10, 4: 3.00, 16: 3.10}, {1: 2.0, 4: 2.5, 16: 2.8})
    assert claims == {U_SHAPE: "agrees", SMALLER: "agrees", OVERFIT: "agrees", LARGE: "disagrees"}


def test_a_monotone_curve_disagrees_with_the_u_and_the_overfitting(hand_made):
    claims = _claims(hand_made, {1: 3.00, 4: 3.05, 16: 3.10}, {1: 2.0, 4: 2.5, 16: 2.8})
    assert claims == {
        U_SHAPE: "disagrees",
        SMALLER: "agrees",
        OVERFIT: "disagrees",
        LARGE: "disagrees",  # worse validation loss with a higher training loss: under-fitting
    }


def test_larger_batches_winning_disagrees_with_smaller_batches_win(hand_made):
    claims = _claims(hand_made, {1: 3.20, 4: 3.10, 16: 3.00}, {1: 2.0, 4: 2.5, 16: 2.8})
    assert claims[SMALLER] == "disagrees"
    # worse validation loss without a lower training loss is under-fitting, not over-fitting
    claims = _claims(hand_made, {1: 3.20, 4: 3.00, 16: 3.10}, {1: 3.0, 4: 2.5, 16: 2.8})
    assert claims[OVERFIT] == "disagrees"


def test_an_optimum_within_pool_noise_is_undetermined(hand_made):
    """The review's case: the optimum beats the usual batch by 0.0001 while pools differ by 0.035:
    the replicate spread widens the interval past zero, so nothing is claimed."""
    val = {1: (3.10, 3.10, 3.10), 4: (3.000, 3.035, 3.0), 16: (3.035, 3.0001, 3.03)}
    claims = _claims(hand_made, val, {1: 2.0, 4: 2.5, 16: 2.8})
    assert claims[SMALLER] == "undetermined" and claims[U_SHAPE] == "undetermined"


def test_noisy_documents_leave_the_u_undetermined(hand_made):
    val, train = {1: 3.003, 4: 3.00, 16: 3.003}, {1: 2.0, 4: 2.5, 16: 2.8}
    claims = _claims(hand_made, val, train, usual=4, noise=0.05)
    assert claims[U_SHAPE] == "undetermined"
    assert claims[SMALLER] == "undetermined"  # batch 1 vs the usual 4: within the noise


def test_claims_are_made_per_model_and_across_sizes(hand_made):
    for model, dip in (("big", 0.1), ("small", 0.0)):
        for pool in POOLS:
            for batch in (1, 4, 16):
                loss = 3.0 + (dip if batch != 4 else 0.0)
                hand_made.add(loss, 2.5, pool=pool, batch_size=batch, model=model)
    table = batch_sweep_claims(
        hand_made.results(), ["big", "small"], dict.fromkeys(POOLS, 16), "set", cap=CAP
    )
    verdicts = table["agrees?"]
    assert verdicts[f"{U_SHAPE}/big"] == "agrees"
    assert verdicts[f"{U_SHAPE}/small"] == "undetermined"
    assert verdicts["u-shape-across-sizes"] == "undetermined"
    assert table.index[0].endswith("/big") and table["claim"].iloc[0].endswith("(big)")


# --- recipe -------------------------------------------------------------------------------------


def _recipe(
    hand_made,
    loaders=(3.0, 3.05, 3.10),
    emb=None,
    original=3.0,
    combined=2.95,
    combined_later=None,
    noise=0.005,
    original_later=None,
    original_elsewhere=None,
):
    """Hand-made sweeps of the four recipe grids, each on every pool. `emb`: loss of the (tied,
    decay on) arms; `original` / `combined`: each recipe's loss at a budget of 4 epochs,
    `original_later` / `combined_later` at 8 (default 0.1 worse); `original_elsewhere`: the
    original's loss at batch 16, where the combined recipe has no run."""
    for pool in POOLS:
        for loader, loss in zip(("repack", "shuffle", "repeat"), loaders):
            hand_made.add(loss, noise=noise, loader=loader, pool=pool)
    sweeps = {"loader": hand_made.results()}
    emb = emb or {(False, False): 3.0, (False, True): 2.95, (True, False): 3.0, (True, True): 2.9}
    for pool in POOLS:
        for (tie, on), loss in emb.items():
            decay = 0.1 * on
            hand_made.add(
                loss, noise=noise, tie_embeddings=tie, embedding_weight_decay=decay, pool=pool
            )
    sweeps["embedding"] = hand_made.results()
    arms = (("original", original, original_later), ("combined", combined, combined_later))
    for name, loss, later in arms:
        for pool in POOLS:
            hand_made.add(loss, noise=noise, pool=pool, epochs=4)
            hand_made.add(later or loss + 0.1, noise=noise, pool=pool, epochs=8)
            if name == "original" and original_elsewhere:
                hand_made.add(original_elsewhere, noise=noise, pool=pool, batch_size=16)
        sweeps[name] = hand_made.results()
    table = recipe_claims(
        sweeps["loader"], sweeps["embedding"], sweeps["original"], sweeps["combined"], cap=CAP
    )
    return table["agrees?"].to_dict(), table


LOADERS, HELPS, TYING = "loader-order/batch 4", "embedding-decay-helps", "tying-does-little"
TOGETHER, COMBINED, LATER = "tying-and-decay-best", "combined-lowers", "stop-later"


def test_recipe_claims_agree_on_clear_effects(hand_made):
    claims, table = _recipe(hand_made, combined_later=2.90)
    assert claims == {
        LOADERS: "agrees",
        HELPS: "agrees",
        TYING: "agrees",
        TOGETHER: "agrees",
        COMBINED: "agrees",
        LATER: "agrees",
    }
    assert table["measured here"].str.contains(r"\[[-+]\d\.\d{3}, [-+]\d\.\d{3}\]").all()


def test_recipe_claims_disagree_on_reversed_effects(hand_made):
    emb = {(False, False): 2.95, (False, True): 3.0, (True, False): 3.0, (True, True): 3.05}
    claims, _ = _recipe(hand_made, (3.10, 3.05, 3.0), emb, 2.95, 3.0, combined_later=3.2)
    assert claims == {
        LOADERS: "disagrees",
        HELPS: "disagrees",
        TYING: "disagrees",
        TOGETHER: "disagrees",
        COMBINED: "disagrees",
        LATER: "disagrees",
    }


def test_the_reviews_cases_are_not_agreements(hand_made):
    """Tying hurts by +0.050 while embedding decay helps by 0.060: tying does not "do little".
    Orderings 3.000 / 3.0005 / 3.001 and a combined change of -0.0001, against per-document
    noise of 0.01: undetermined."""
    emb = {(False, False): 3.0, (False, True): 2.94, (True, False): 3.05, (True, True): 2.9}
    claims, _ = _recipe(
        hand_made, (3.000, 3.0005, 3.001), emb, 3.0, 2.9999, combined_later=None, noise=0.01
    )
    assert claims[TYING] == "disagrees"
    assert claims[LOADERS] == "undetermined" and claims[COMBINED] == "undetermined"


def test_the_original_is_compared_at_the_combined_recipes_batches_only(hand_made):
    """The original's lower loss at a batch the combined recipe has no run at is not compared:
    both arms tune the batch over the same set."""
    claims, _ = _recipe(hand_made, combined_later=2.9, original_elsewhere=2.5)
    assert claims[COMBINED] == "agrees"


def test_a_stopping_point_that_moves_with_both_recipes_is_not_a_change(hand_made):
    """Later budgets help both recipes by the same 0.1 nats: the difference-in-differences is 0,
    so "moves later" is not claimed (the rule before compared the combined recipe's budgets
    only)."""
    claims, table = _recipe(hand_made, original_later=2.9, combined_later=2.85, combined=2.95)
    assert claims[LATER] == "undetermined"
    assert "later = budgets > 4" in table.loc[LATER, "measured here"]
    for pool in POOLS:
        hand_made.add(3.2, pool=pool, epochs=4)
        hand_made.add(3.0, pool=pool, epochs=8)
    ends = tuned(hand_made.results(), ["pool"])
    assert ends["at_largest_budget"].all() and (ends["epochs"] == 8).all()


@pytest.mark.parametrize(
    "cap, verdict, note",
    [(CAP, "undetermined", "(censored: both arms)"), (16, "agrees", "(at cap: both arms)")],
)
def test_a_later_arm_at_its_largest_budget_blocks_agreement_below_the_cap(
    hand_made, cap, verdict, note
):
    """With budgets 2-16 split at 4, both later arms are best at 16, the largest tried: below the
    study's cap they might still fall, so a stopping point that seems to move later is
    undetermined; with the cap at 16 it agrees within the cap."""
    budgets = {"original": (3.0, 3.0, 2.9, 2.8), "combined": (3.0, 3.0, 2.8, 2.6)}
    sweeps = {}
    for name, losses in budgets.items():
        for pool in POOLS:
            for epochs, loss in zip((2, 4, 8, 16), losses):
                hand_made.add(loss, pool=pool, epochs=epochs)
        sweeps[name] = hand_made.results()
    empty = sweeps["original"].subset(sweeps["original"].runs["epochs"] < 0)
    table = recipe_claims(empty, empty, sweeps["original"], sweeps["combined"], cap=cap)
    row = table.loc[LATER]
    assert row["agrees?"] == verdict and row["measured here"].endswith(note)


def test_pool_claims_are_exact_checks():
    overlap = pd.DataFrame(
        {"shared train docs": [1], "train docs a": [12], "identical val": [True]}
    )
    clean = pool_claims(overlap, [0, 0])
    assert clean["agrees?"].tolist() == ["agrees"] * 3
    measured = clean.loc["pools-differ-in-train", "measured here"]
    assert measured == "shared train docs: [1] of [12] (exact count)"
    same = overlap.assign(**{"shared train docs": [12], "identical val": [False]})
    assert pool_claims(same, [0, 3])["agrees?"].tolist() == ["disagrees"] * 3


@pytest.mark.parametrize("tie_shift,verdict", [(0.001, "agrees"), (0.05, "disagrees")])
def test_tying_does_little_is_judged_against_zero(hand_made, tie_shift, verdict):
    emb = {
        (False, False): 3.0,
        (False, True): 2.95,
        (True, False): 3.0 + tie_shift,
        (True, True): 2.9,
    }
    claims, _ = _recipe(hand_made, emb=emb, combined_later=2.9)
    assert claims[TYING] == verdict


@pytest.mark.parametrize(
    "value,censored,verdict",
    [
        (0.0, (False, False), "agrees"),
        (0.0, (True, False), "undetermined"),  # the censored arm might still pull away
        (0.05, (False, False), "disagrees"),
        (0.05, (False, True), "disagrees"),  # the better arm can only get better
        (0.05, (True, False), "undetermined"),  # the worse arm might still catch up
        (-0.05, (False, True), "undetermined"),
        (-0.05, (True, False), "disagrees"),
        (0.012, (False, False), "undetermined"),  # the interval straddles +0.01
    ],
)
def test_does_little_respects_censored_arms(value, censored, verdict):
    diff = Difference(value, value - 0.005, value + 0.005, (value,) * 3, censored)
    assert little_verdict(diff) == verdict
    assert little_verdict(diff._replace(per_replicate=(value,))) == "undetermined"


def test_a_claim_row_carries_the_numbers_of_the_difference_it_hinges_on(hand_made):
    """The U-shape hinges on its less clear edge: batch 1 is 0.02 worse than the interior, batch
    16 0.3. The row's numbers are that difference's (95%: two edges), the smaller-batch claim's
    its one difference's; pools_needed only where the claim is undetermined."""
    results = _batch_sweep(hand_made, {1: 3.02, 4: 3.0, 16: 3.3}, dict.fromkeys((1, 4, 16), 2.0))
    table = batch_sweep_claims(results, ["m"], dict.fromkeys(POOLS, 16), "set", cap=CAP)
    batch = results.runs["batch_size"]
    interior = arm(results, batch == 4, cap=CAP)
    expected = {
        f"{U_SHAPE}/m": compare(interior, arm(results, batch == 1, cap=CAP), PAIR_LEVEL),
        f"{SMALLER}/m": compare(arm(results, batch < 16, cap=CAP), arm(results, batch == 16)),
    }
    for key, diff in expected.items():
        row = table.loc[key]
        assert (row["effect"], row["low"], row["high"]) == (diff.value, diff.low, diff.high)
        assert (row["level"], row["n"], row["mde"]) == (diff.level, 3, diff.mde)
        needed = diff.replicates_needed() if row["agrees?"] == "undetermined" else np.nan
        assert row["pools_needed"] == needed or np.isnan(row["pools_needed"]) and np.isnan(needed)
    assert table.loc[f"{U_SHAPE}/m", "level"] == PAIR_LEVEL


def test_an_edge_whose_best_budget_is_the_largest_tried_leaves_the_u_undetermined(hand_made):
    """Batch 16 is best at the largest budget (8 epochs): with more epochs it might beat the
    interior, so the U-shape cannot be confirmed."""
    for pool in POOLS:
        for batch, (at4, at8) in {1: (3.1, 3.2), 4: (3.0, 3.1), 16: (3.3, 3.2)}.items():
            hand_made.add(at4, pool=pool, batch_size=batch, epochs=4)
            hand_made.add(at8, pool=pool, batch_size=batch, epochs=8)
    table = batch_sweep_claims(hand_made.results(), ["m"], dict.fromkeys(POOLS, 16), "set", cap=CAP)
    assert table.loc[f"{U_SHAPE}/m", "agrees?"] == "undetermined"
    assert "(censored: second arm)" in table.loc[f"{U_SHAPE}/m", "measured here"]


def test_the_usual_batch_is_measured_per_model_at_one_epoch(hand_made):
    from repro.analysis.analyses import usual_batch
    from repro.design.preset_files import PRESETS

    for model, losses in (("big", {2: 3.0, 8: 3.1}), ("small", {2: 3.3, 8: 3.1})):
        for batch, loss in losses.items():
            hand_made.add(loss, model=model, batch_size=batch, epochs=1)
    results = hand_made.results()
    # mean over the two sizes: batch 2 at 3.15, batch 8 at 3.1 (no model is tuned over)
    assert usual_batch(results, PRESETS["smoke"]) == {"p0": 8}
    assert usual_batch(results, PRESETS["gpu"]) == {"p0": 64}  # as set


def test_the_usual_batch_of_a_pool_is_measured_on_the_other_pools(hand_made):
    """Each pool's usual batch comes from the other pools' one-epoch losses: p1's is 2, p0's and
    p2's are 8. The pools disagree, so "smaller batches win" is undetermined."""
    from repro.analysis.analyses import usual_batch
    from repro.design.preset_files import PRESETS

    at_one = {"p0": {2: 3.0, 8: 3.1}, "p1": {2: 3.1, 8: 3.0}, "p2": {2: 3.1, 8: 3.05}}
    for pool, losses in at_one.items():
        for batch, loss in losses.items():
            hand_made.add(loss, pool=pool, batch_size=batch, epochs=1)
    usual = usual_batch(hand_made.results(), PRESETS["smoke"])
    assert usual == {"p0": 8, "p1": 2, "p2": 8}  # p1's own 8 does not count for p1
    for pool in POOLS:
        for batch in (2, 8):
            hand_made.add(3.0, pool=pool, batch_size=batch, epochs=4)
    table = batch_sweep_claims(hand_made.results(), ["m"], usual, "measured", cap=CAP)
    row = table.loc[f"{SMALLER}/m"]
    assert row["agrees?"] == "undetermined" and "differs between pools" in row["measured here"]


def test_loss_per_budget_tunes_within_each_budget(hand_made):
    from repro.analysis.analyses import loss_per_budget

    for pool in POOLS:
        for epochs, lr, loss in ((4, 1e-3, 3.2), (4, 3e-3, 3.1), (8, 1e-3, 3.0), (8, 3e-3, 3.05)):
            hand_made.add(loss, pool=pool, epochs=epochs, lr=lr)
    hand_made.add(2.5, pool=POOLS[0], epochs=16)  # grown past the grid on one pool only
    table = loss_per_budget(hand_made.results())
    assert table.loc[("m", 4), 4] == pytest.approx(3.1, abs=0.01)
    assert table.loc[("m", 4), 8] == pytest.approx(3.0, abs=0.01)
    assert np.isnan(table.loc[("m", 4), 16])


@pytest.mark.parametrize("at16,plausible", [(3.05, (4, 16)), (3.30, (4, 4))])
def test_optimal_batch_and_the_batches_the_data_cannot_tell_apart(hand_made, at16, plausible):
    """Per-document difficulty makes a single arm's interval about +-0.08 nats wide: batch 16 at
    +0.05 overlaps the optimum (batch 4), at +0.30 it does not; batch 1 never does."""
    results = _batch_sweep(hand_made, {1: 3.30, 4: 3.00, 16: at16}, {1: 2, 4: 2, 16: 2})
    ends = batch_endpoints(results).assign(model="tiny")
    (row,) = optimal_batches(ends, ["tiny"], 300).to_dict("records")
    assert row["batch"] == 4 and row["replicate_batches"] == [4, 4, 4] and row["params"] > 0
    assert (row["plausible_low"], row["plausible_high"]) == plausible
