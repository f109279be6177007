"""Notebook 02's AdamW beta2 ablation: its claims on hand-made results in all three directions,
with either setting as the batch sweep's, too few pools and a diverged arm; the settings table."""

import re

import numpy as np
import pytest

from repro.analysis.intervals import Difference
from repro.analysis.optimizer_claims import (
    beta2_claims,
    beta2_reason,
    beta2_settings,
    deficit_verdict,
)
from repro.design.preset_files import PRESETS
from repro.design.presets import changed

POOLS = ("p0", "p1", "p2")
CAP = 32  # epochs: the study's cap, above every budget tried here
DEFICIT, OVERFITS = "deficit-is-optimizer", "rule-smallest-overfits"


def _lowers(batch: int) -> str:
    return f"rule-lowers/{batch}"


def _arm(hand_made, val: dict, train: dict | None = None, noise=0.005, pools=POOLS, **fields):
    """One run per pool and batch with val loss val[batch] and train loss train[batch] (default
    2.0), nats/token."""
    for pool in pools:
        for batch, loss in val.items():
            train_loss = (train or {}).get(batch, 2.0)
            hand_made.add(loss, train_loss, noise, pool=pool, batch_size=batch, **fields)
    return hand_made.results()


def _verdicts(sweep, ablation, sweep_uses_rule=False) -> dict[str, str]:
    table = beta2_claims(sweep, ablation, "m", sweep_uses_rule, cap=CAP)
    return table["agrees?"].to_dict()


def test_the_rule_removing_batch_1s_deficit_agrees(hand_made):
    """Reference betas (the sweep): batch 1 is 0.3 worse than batch 4; with the rule it is 0.03
    better, with the same training loss: the deficit was the optimizer's, not over-fitting."""
    sweep = _arm(hand_made, {1: 3.3, 2: 3.1, 4: 3.0, 8: 3.05})
    ablation = _arm(hand_made, {1: 2.97, 2: 3.02}, adam_beta2=0.99)
    assert _verdicts(sweep, ablation) == {
        _lowers(1): "agrees",
        _lowers(2): "agrees",
        DEFICIT: "agrees",
        OVERFITS: "disagrees",  # better val loss than the best other batch
    }


def test_the_rule_making_things_worse_disagrees_and_an_overfitting_batch_1_agrees(hand_made):
    sweep = _arm(hand_made, {1: 3.3, 2: 3.1, 4: 3.0})
    ablation = _arm(hand_made, {1: 3.4, 2: 3.2}, {1: 1.5}, adam_beta2=0.99)
    assert _verdicts(sweep, ablation) == {
        _lowers(1): "disagrees",
        _lowers(2): "disagrees",
        DEFICIT: "disagrees",  # 0.4 nats/token left
        OVERFITS: "agrees",  # worse val loss with a lower training loss
    }


def test_differences_within_the_noise_are_undetermined(hand_made):
    """The rule's batch 1 sits at the margin (+0.01 over batch 4) with noisy documents."""
    sweep = _arm(hand_made, {1: 3.01, 4: 3.0}, noise=0.05)
    ablation = _arm(hand_made, {1: 3.01}, noise=0.05, adam_beta2=0.99)
    assert set(_verdicts(sweep, ablation).values()) == {"undetermined"}


def test_a_deficit_just_above_the_margin_disagrees_and_just_below_agrees(hand_made):
    sweep = _arm(hand_made, {1: 3.3, 4: 3.0})
    above = _arm(hand_made, {1: 3.03}, adam_beta2=0.99)
    below = _arm(hand_made, {1: 2.99}, adam_beta2=0.99)
    assert _verdicts(sweep, above)[DEFICIT] == "disagrees"
    assert _verdicts(sweep, below)[DEFICIT] == "agrees"


def test_the_rule_is_the_sweeps_runs_when_the_sweep_uses_it(hand_made):
    """The same losses read the other way round: the sweep scales beta2, the ablation runs the
    reference betas, so the rule's batch 1 is the sweep's."""
    sweep = _arm(hand_made, {1: 2.97, 2: 3.02, 4: 3.0}, adam_beta2=0.99)
    ablation = _arm(hand_made, {1: 3.3, 2: 3.1})
    assert _verdicts(sweep, ablation, sweep_uses_rule=True) == {
        _lowers(1): "agrees",
        _lowers(2): "agrees",
        DEFICIT: "agrees",
        OVERFITS: "disagrees",
    }
    flipped = _verdicts(sweep, ablation, sweep_uses_rule=False)
    assert flipped[_lowers(1)] == "disagrees" and flipped[DEFICIT] == "disagrees"


def test_two_pools_give_no_verdict(hand_made):
    sweep = _arm(hand_made, {1: 3.3, 2: 3.1, 4: 3.0}, pools=POOLS[:2])
    ablation = _arm(hand_made, {1: 3.4, 2: 3.2}, {1: 1.5}, pools=POOLS[:2], adam_beta2=0.99)
    table = beta2_claims(sweep, ablation, "m", False, cap=CAP)
    assert set(table["agrees?"]) == {"undetermined"}
    assert "(2 of 3 replicates: no verdict)" in table["measured here"].iloc[0]


def test_an_arm_whose_every_run_diverged_is_undetermined_not_a_crash(hand_made):
    sweep = _arm(hand_made, {1: 3.3, 2: 3.1, 4: 3.0})
    ablation = _arm(hand_made, {1: 3.0, 2: 3.0}, status="diverged", adam_beta2=0.99)
    table = beta2_claims(sweep, ablation, "m", False, cap=CAP)
    assert set(table["agrees?"]) == {"undetermined"}
    assert "not measured" in table["measured here"].iloc[0]
    assert re.search(r"reference betas \+0\.[23]\d\d \[", table["measured here"].iloc[2])


def test_only_the_ablations_model_is_compared(hand_made):
    """Another model's better batch must not be the best other batch."""
    for pool in POOLS:
        hand_made.add(3.3, pool=pool, batch_size=1)
        hand_made.add(3.0, pool=pool, batch_size=4)
        hand_made.add(2.0, pool=pool, batch_size=2, model="other")
    sweep = hand_made.results()
    ablation = _arm(hand_made, {1: 2.97}, adam_beta2=0.99)
    assert _verdicts(sweep, ablation)[DEFICIT] == "agrees"


@pytest.mark.parametrize(
    "diff, verdict",
    [
        (Difference(0.005, -0.001, 0.009, (0.0, 0.005, 0.01)), "agrees"),  # at most 0.009
        (Difference(-0.1, -0.2, -0.05, (-0.1, -0.1, -0.1)), "agrees"),  # reversed
        (Difference(0.02, 0.012, 0.03, (0.02, 0.02, 0.02)), "disagrees"),  # at least 0.012
        (Difference(0.01, 0.0, 0.02, (0.0, 0.01, 0.02)), "undetermined"),  # straddles 0.01
        (Difference(0.02, 0.012, 0.03, (0.02,) * 3, (True, False)), "undetermined"),
        (Difference(-0.1, -0.2, -0.05, (-0.1,) * 3, (False, True)), "undetermined"),
        (Difference(-0.1, -0.2, -0.05, (-0.1, -0.1)), "undetermined"),  # two replicates
    ],
)
def test_the_deficit_verdict_has_a_margin_of_little_and_respects_censoring(diff, verdict):
    """A censored batch-1 arm might still fall (no "disagrees"), a censored best other batch
    too (no "agrees")."""
    assert deficit_verdict(diff) == verdict


def test_the_settings_table_keeps_the_token_half_life_under_the_rule():
    """With fixed betas (0.95 at every batch) the ablation's 0.95 ** (B / 8) at batches 1 and 2 has
    the half-life 0.95 has at batch 8: 13.51 steps of 8 x 128 tokens, 13,838 tokens. The cpu preset
    itself anchors 0.95 at batch 32: 55,351 tokens at every batch, the reference betas in its
    ablation at batch 1."""
    fixed = changed(
        PRESETS["cpu"],
        grid={"beta2_half_life_batch": 0},
        batch_sweep={"beta2_ablation_batch_sizes": ()},
    )
    table = beta2_settings(fixed).set_index("batch (sequences)")
    assert (table["sweep beta2"] == 0.95).all()
    assert table.loc[[1, 2], "ablation beta2"].tolist() == [0.99361, 0.9873]
    assert table.loc[[1, 2], "ablation half-life (tokens)"].tolist() == pytest.approx(
        [13_838, 13_838],
        rel=5e-3,  # beta2 keeps 3 significant digits of 1 - beta2
    )
    assert table.loc[8, "sweep half-life (tokens)"] == 13_838
    assert table["ablation beta2"].isna().sum() == len(fixed.grid.batch_sizes) - 2
    cpu = beta2_settings(PRESETS["cpu"]).set_index("batch (sequences)")
    assert cpu["sweep half-life (tokens)"].to_numpy() == pytest.approx(55_351, rel=5e-3)
    assert cpu.loc[32, "sweep beta2"] == 0.95 and cpu.loc[1, "sweep beta2"] == 0.9984
    assert cpu.loc[[1], "ablation beta2"].tolist() == [0.95]
    assert cpu["ablation beta2"].isna().sum() == len(fixed.grid.batch_sizes) - 1
    assert np.isfinite(cpu["sweep beta2"]).all()


def test_the_reason_names_the_sweeps_setting_and_the_ablations():
    fixed = changed(
        PRESETS["cpu"],
        grid={"beta2_half_life_batch": 0},
        batch_sweep={"beta2_ablation_batch_sizes": ()},
    )
    text = beta2_reason(fixed)
    assert text.startswith("batch sweep: reference betas (0.9, 0.95) at every batch")
    assert "ablation at batches 1, 2 (sequences), first model tiny: half-life rule, beta2" in text
    assert "0.95 ** (B / 8)" in text
    ruled = beta2_reason(changed(fixed, grid={"beta2_half_life_batch": 4}))
    assert ruled.startswith("batch sweep: half-life rule, beta2 0.95 ** (B / 4)")
    assert "largest batch of the grid" not in ruled
    assert ruled.endswith("reference betas (0.9, 0.95) at every batch")
    anchored = beta2_reason(PRESETS["cpu"])
    assert "0.95 ** (B / 32)" in anchored and "that is the largest batch of the grid" in anchored
