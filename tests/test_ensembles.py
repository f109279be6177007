"""Ensembles of seeds (repro.analysis.ensembles): the ensemble's loss from its members' per-token
losses (identical members, a two-member case by hand), the claims in all three directions and
their calibration; and a run with token_losses keeps losses whose mean is its val loss."""

import json
from itertools import product

import numpy as np
import pandas as pd
import pytest

from repro.analysis.ensembles import (
    ensemble_batches,
    ensemble_claims,
    ensemble_curve,
    ensemble_loss,
    ensemble_summary,
    ensemble_table,
    overfitting_order,
)
from repro.analysis.intervals import t_interval
from repro.design.grids import ensemble_grid
from repro.runtime.config import make_run_config
from repro.runtime.run_dir import ANALYSED_FILE, RunDir
from repro.runtime.train import train

POOLS = ["p1", "p2", "p3", "p4"]


def test_an_ensemble_of_identical_members_is_the_member():
    member = np.array([0.2, 1.3, 4.0, 0.7])
    assert ensemble_loss(np.stack([member] * 3)) == pytest.approx(member.mean())
    assert ensemble_curve(np.stack([member] * 4)) == pytest.approx([member.mean()] * 4)


def test_two_members_by_hand():
    """Token 1: the members give the true token 0.5 and 0.25; token 2: 0.1 and 0.3. The ensemble
    gives their means, 0.375 and 0.2."""
    losses = -np.log([[0.5, 0.1], [0.25, 0.3]])
    expected = -(np.log(0.375) + np.log(0.2)) / 2
    assert ensemble_loss(losses) == pytest.approx(expected)
    single = losses.mean()  # K = 1: the mean single member over both
    assert ensemble_curve(losses) == pytest.approx([single, expected])
    assert expected < single  # Jensen: an ensemble is never worse than its mean member


def _table(gains: dict[str, list[float]]) -> pd.DataFrame:
    """Hand-made ensemble curves: per role and pool, the single model's loss (3.0 plus a pool
    draw) and the 8-member ensemble's, lower by that pool's gain."""
    rows = []
    for role, values in gains.items():
        for i, (pool, gain) in enumerate(zip(POOLS, values)):
            single = 3.0 + 0.05 * i
            for k in (1, 8):
                loss = single - gain * (k == 8)
                rows.append({"role": role, "batch_size": 1, "pool": pool, "K": k, "loss": loss})
    return pd.DataFrame(rows)


def _members(table: pd.DataFrame) -> pd.DataFrame:
    """8 members per role and pool around the table's single model (its K = 1 loss), the best
    0.02 below it."""
    single = table[table["K"] == 1]
    offsets = np.linspace(-0.02, 0.02, 8)
    return pd.DataFrame(
        [
            {"role": row.role, "pool": row.pool, "seed": k, "val_loss": row.loss + offset}
            for row in single.itertuples()
            for k, offset in enumerate(offsets)
        ]
    )


DECIDED = ("smallest batch", "largest batch", t_interval([0.10, 0.12, 0.11]))  # overfitting_order
OPEN = ("smallest batch", "largest batch", t_interval([0.05, -0.03, 0.01]))


@pytest.mark.parametrize(
    "small, large, verdict",
    [
        ([0.05, 0.06, 0.05, 0.07], [0.01, 0.02, 0.01, 0.02], "agrees"),
        ([0.01, 0.02, 0.01, 0.02], [0.05, 0.06, 0.05, 0.07], "disagrees"),
        ([0.05, 0.01, 0.02, 0.06], [0.02, 0.05, 0.04, 0.03], "undetermined"),
    ],
)
def test_the_gain_vs_overfitting_claim_decides_in_all_three_directions(small, large, verdict):
    table = _table({"smallest batch": small, "largest batch": large, "best batch": small})
    beats, larger = ensemble_claims(table, _members(table), DECIDED)
    assert larger.verdict == verdict
    assert larger.difference.per_replicate == pytest.approx(np.subtract(small, large))
    assert "smallest batch" in larger.measured.split(" - ")[0]  # the batch that over-fits more


def test_the_gain_vs_overfitting_claim_needs_the_overfitting_order_decided():
    small, large = [0.05, 0.06, 0.05, 0.07], [0.01, 0.02, 0.01, 0.02]
    table = _table({"smallest batch": small, "largest batch": large, "best batch": small})
    larger = ensemble_claims(table, _members(table), OPEN)[1]
    assert larger.verdict == "undetermined"
    assert "which batch over-fits more is not decided" in larger.measured


def test_the_overfitting_order_is_read_from_the_selection_endpoints():
    ends = pd.DataFrame(
        [
            {"pool": pool, "batch_size": batch, "val_loss": 3.0 + gap, "train_loss": 3.0}
            for pool, gaps in zip(("a", "b", "c"), ([0.3, 0.1], [0.32, 0.12], [0.29, 0.08]))
            for batch, gap in zip((1, 32), gaps)
        ]
    )
    batches = {"smallest and best batch": 1, "largest batch": 32}
    overfits, other, gap = overfitting_order(ends, batches)
    assert (overfits, other) == ("smallest and best batch", "largest batch")
    assert gap.value == pytest.approx(0.2033, abs=1e-4) and gap.low > 0
    flipped = ends.assign(train_loss=ends["train_loss"] + 0.5 * (ends["batch_size"] == 1))
    assert overfitting_order(flipped, batches)[:2] == ("largest batch", "smallest and best batch")


def test_roles_that_share_a_batch_are_one_ensemble(hand_made):
    """The best batch of a sweep can be its smallest: both roles then name one set of members."""
    for pool in ("p0", "p1", "p2"):
        for batch, loss in ((1, 3.0), (4, 3.1), (16, 3.2)):
            hand_made.add(loss, pool=pool, batch_size=batch)
    roles = ensemble_batches(hand_made.results())
    assert roles == {"smallest and best batch": 1, "largest batch": 16}
    for pool in ("p0", "p1", "p2"):
        for batch, loss in ((1, 3.2), (4, 3.0), (16, 3.1)):
            hand_made.add(loss, pool=pool, batch_size=batch)
    roles = ensemble_batches(hand_made.results())
    assert roles == {"smallest batch": 1, "largest batch": 16, "best batch": 4}


@pytest.mark.parametrize(
    "gain, verdict",
    [([0.05, 0.06, 0.05, 0.07], "agrees"), ([-0.05, -0.06, -0.05, -0.07], "disagrees")]
    + [([0.03, -0.01, 0.04, 0.0], "undetermined")],
)
def test_the_ensemble_beats_single_claim_decides_in_all_three_directions(gain, verdict):
    """Against the best member, 0.02 below the mean single model: an ensemble gain below 0.02
    loses to it (a negative gain cannot come from real ensembles, but the logic must say so)."""
    table = _table({"smallest batch": gain, "largest batch": gain, "best batch": gain})
    beats, _ = ensemble_claims(table, _members(table), DECIDED)
    assert beats.verdict == verdict
    assert beats.difference.value == pytest.approx(0.02 - np.mean(gain))


def test_the_summary_gives_each_k_its_interval_and_gain_over_pools():
    table = _table({"best batch": [0.05, 0.06, 0.05, 0.07]})
    summary = ensemble_summary(table).set_index("K")
    assert summary.loc[8, "gain"] == pytest.approx(0.0575)
    assert summary.loc[1, "gain"] == 0.0
    assert summary.loc[8, "low"] < summary.loc[8, "loss"] < summary.loc[8, "high"]
    assert summary.loc[8, "pools"] == 4


def test_the_ensemble_claims_are_calibrated_over_simulated_studies():
    """4 pools, gains with a per-pool spread: no true difference in gain gives a definite verdict
    at most 10% (+3%) of the time; a known one is covered at least 87% of the time."""
    rng = np.random.default_rng(11)
    definite, covered, trials = 0, 0, 600
    for trial in range(trials):
        effect = 0.0 if trial % 2 == 0 else 0.02
        small = 0.04 + effect + 0.01 * rng.standard_normal(4)
        large = 0.04 + 0.01 * rng.standard_normal(4)
        table = _table({"smallest batch": small, "largest batch": large, "best batch": small})
        larger = ensemble_claims(table, _members(table), DECIDED)[1]
        if effect == 0.0:
            definite += larger.verdict != "undetermined"
        else:
            covered += larger.difference.low <= effect <= larger.difference.high
    assert definite / (trials / 2) <= 0.10 + 0.03
    assert covered / (trials / 2) >= 0.87


def test_the_members_grid_gives_each_pool_every_seed_keeping_token_losses():
    grid = ensemble_grid({"batch_size": 2, "seed": 3}, ["a", "b"], 4)
    assert grid["fixed"]["token_losses"] is True
    assert list(product(grid["axes"]["pool"], grid["axes"]["seed"]))[-1] == ("b", 6)


def test_a_run_keeps_each_validation_token_loss_whose_mean_is_its_val_loss(
    synthetic_pool, tmp_path
):
    fields = {"pool": str(synthetic_pool), "seq_len": 32, "batch_size": 4, "epochs": 1}
    train(make_run_config(fields | {"token_losses": True}), tmp_path / "kept", progress=False)
    train(make_run_config(fields), tmp_path / "plain", progress=False)
    kept, plain = RunDir(tmp_path / "kept"), RunDir(tmp_path / "plain")
    losses = kept.token_losses()
    final = [json.loads(line) for line in kept.metrics_file.read_text().splitlines()][-1]
    assert losses.dtype == np.float32 and len(losses) > 1000
    assert float(losses.astype(float).mean()) == pytest.approx(final["val_loss"], abs=1e-5)
    assert ANALYSED_FILE.fullmatch(kept.entry(kept.token_losses_file))  # bundles carry it
    assert not plain.token_losses_file.exists()
    plain_final = [json.loads(line) for line in plain.metrics_file.read_text().splitlines()][-1]
    assert plain_final["val_loss"] == final["val_loss"]  # keeping them changes no bit


def test_the_table_reads_each_members_token_losses_in_seed_order():
    rng = np.random.default_rng(0)
    losses = {f"{pool}-{seed}": rng.random(50) for pool in ("a", "b") for seed in (0, 1, 2)}
    members = pd.DataFrame(
        [
            {"role": "best batch", "batch_size": 2, "pool": pool, "seed": seed}
            | {"run_id": f"{pool}-{seed}"}
            for pool in ("a", "b")
            for seed in (2, 0, 1)
        ]
    )
    table = ensemble_table(members, losses.__getitem__).set_index(["pool", "K"])["loss"]
    stacked = np.stack([losses[f"a-{seed}"] for seed in (0, 1, 2)])
    assert table[("a", 3)] == pytest.approx(ensemble_loss(stacked))
    assert table[("a", 1)] == pytest.approx(stacked.mean())
