"""Choose on a few pools, confirm on many (repro.analysis.confirmation): the pooled choice, the
configurations an analysis asks for, confirmed endpoints and their verdicts, in all three
directions and under a simulated null."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from repro.analysis.analyses import arm
from repro.analysis.confirmation import (
    HELD_OUT,
    Confirmation,
    pooled_choice,
    recipe,
    with_past_cap,
)
from repro.analysis.intervals import LEVEL, Claim, claim_table, lower_verdict, shown_claims
from repro.analysis.selection import compare
from repro.errors import ReproError
from repro.runtime.config import make_run_config, run_id

SELECTION = ["p0", "p1", "p2"]
CONFIRMATION = tuple(f"c{i}" for i in range(8))


def _selection(hand_made, losses: dict[tuple[str, float], float]):
    """Runs on the selection pools: (loader, lr) -> mean loss, with pool-to-pool noise."""
    rng = np.random.default_rng(1)
    for pool in SELECTION:
        for (loader, lr), loss in losses.items():
            hand_made.add(loss + 0.002 * rng.standard_normal(), pool=pool, loader=loader, lr=lr)
    return hand_made.results()


def _confirm(hand_made, asking: Confirmation, effects: dict, spread: float):
    """Confirmation runs of every wanted configuration: loss 3 + effects[loader] (or
    effects[(loader, epochs)]) + a per-pool draw shared by the arms (pairing) + `spread` of noise
    per run."""
    rng = np.random.default_rng(2)
    shared = {pool: 0.1 * rng.standard_normal() for pool in asking.pools}
    for fields in asking.wanted:
        effect = effects.get((fields["loader"], fields["epochs"]), effects.get(fields["loader"]))
        for pool in asking.pools:
            rid = run_id(make_run_config(fields | {"pool": pool}))
            loss = 3.0 + effect + shared[pool] + spread * rng.standard_normal()
            named = {k: fields[k] for k in ("loader", "lr", "epochs")}
            hand_made.add(loss, rid=rid, **named, pool=pool)
    return replace(asking, results=hand_made.results(), wanted=[])


def test_a_replicate_is_a_pool_and_seed_for_the_pooled_choice(hand_made):
    """With 3 pools x 2 seeds, a candidate that only seed 0 finished (on every pool) is not chosen
    over one that every pool and seed finished."""
    for pool in SELECTION:
        for seed in (0, 1):
            hand_made.add(3.1, pool=pool, seed=seed, lr=1e-3)
        hand_made.add(3.0, pool=pool, seed=0, lr=3e-3)
    chosen = pooled_choice(hand_made.results(), ("lr", "weight_decay", "epochs"))
    assert chosen["lr"] == 1e-3


def test_the_pooled_choice_has_the_lowest_mean_over_the_replicates(hand_made):
    """lr 1e-3 is best on average though not on every pool; a candidate that only some pools
    finished is not chosen over ones that all did."""
    for pool, losses in zip(SELECTION, ([3.0, 3.1], [3.2, 3.1], [3.0, 3.1])):
        for lr, loss in zip((1e-3, 3e-3), losses):
            hand_made.add(loss, pool=pool, lr=lr)
    hand_made.add(2.0, pool="p0", lr=1e-2)  # lowest, but on one pool only
    chosen = pooled_choice(hand_made.results(), ("lr", "weight_decay", "epochs"))
    assert chosen["lr"] == 1e-3 and chosen["pool"] == "p0"
    assert "pool" not in recipe(chosen) and recipe(chosen)["lr"] == 1e-3


@pytest.mark.parametrize(
    "effect, verdict", [(-0.05, "agrees"), (0.05, "disagrees"), (0.0, "undetermined")]
)
def test_confirmed_arms_pair_by_pool_and_decide_in_all_three_directions(hand_made, effect, verdict):
    """REPACK minus SHUFFLE: each arm's configuration is chosen on the selection pools (the lr
    that is best there), asked for, trained on 8 confirmation pools, and compared pool by pool:
    the shared per-pool draw (0.1 nats) cancels, so 0.05 nats is decided."""
    losses = {("repack", 1e-3): 3.1, ("repack", 3e-3): 3.0, ("repack", 1e-2): 3.2}
    losses |= {("shuffle", 1e-3): 3.2, ("shuffle", 3e-3): 3.1, ("shuffle", 1e-2): 3.0}
    losses[("shuffle", 3e-2)] = 3.1  # shuffle's best lr, 1e-2, is bracketed too
    results = _selection(hand_made, losses)
    asking = Confirmation(CONFIRMATION)
    runs = results.runs

    def diff(results):
        arms = [arm(results, runs["loader"] == k, (), cap=4) for k in ("repack", "shuffle")]
        return compare(*arms)

    diff(replace(results, confirmation=asking))
    assert sorted((f["loader"], f["lr"]) for f in asking.wanted) == [
        ("repack", 3e-3),
        ("shuffle", 1e-2),
    ]
    confirmed = _confirm(hand_made, asking, {"repack": effect, "shuffle": 0.0}, 0.01)
    measured = diff(replace(results, confirmation=confirmed))
    assert len(measured.per_replicate) == len(CONFIRMATION) and measured.level == LEVEL
    assert measured.high - measured.low < 0.04  # the pools' shared draw cancels
    assert lower_verdict([measured]) == verdict


def test_confirmed_endpoints_keep_the_selection_flags_and_name_a_missing_run(hand_made):
    """A confirmed arm is censored or at the cap where its selection endpoints were; a
    confirmation run that was never trained is a one-line error naming it."""
    results = _selection(hand_made, {("repack", 1e-3): 3.0, ("repack", 3e-3): 3.2})
    selection = arm(results, None, (), cap=4)
    chosen = pooled_choice(results, ("lr", "weight_decay", "epochs"))
    asking = Confirmation(CONFIRMATION)
    assert asking.endpoints(chosen, selection) is selection and len(asking.wanted) == 1
    confirmed = _confirm(hand_made, asking, {"repack": 0.0}, 0.01)
    ends = confirmed.endpoints(chosen, selection)
    assert list(ends["pool"]) == list(CONFIRMATION) and set(ends["held_out"]) == {HELD_OUT}
    assert ends["at_cap"].all() and not ends["bracketed"].any()  # lr 1e-3: the grid's bottom
    empty = Confirmation(
        CONFIRMATION, confirmed.results.subset(confirmed.results.runs["pool"] != "c3")
    )
    with pytest.raises(ReproError, match="confirmation run .* is not finished"):
        empty.endpoints(chosen, selection)
    with pytest.raises(ReproError, match="mixes confirmed endpoints"):
        compare(ends, selection)


def test_confirmed_verdicts_are_calibrated_under_a_simulated_null():
    """No true effect, 8 pools, a shared per-pool draw and per-run noise: a definite verdict at
    most 10% of the time (90% intervals), and 90% intervals cover a known effect at least 87% of
    the time."""
    rng = np.random.default_rng(3)
    definite, covered, trials = 0, 0, 600
    for trial in range(trials):
        effect = 0.0 if trial % 2 == 0 else 0.03
        shared = 0.1 * rng.standard_normal(len(CONFIRMATION))
        arms = [
            pd.DataFrame(
                {
                    "pool": CONFIRMATION,
                    "val_loss": 3.0 + shift + shared + 0.02 * rng.standard_normal(len(shared)),
                    "held_out": HELD_OUT,
                    "at_largest_budget": False,
                    "at_cap": False,
                    "bracketed": True,
                }
            )
            for shift in (effect, 0.0)
        ]
        diff = compare(*arms)
        if effect == 0.0:
            definite += lower_verdict([diff]) != "undetermined"
        else:
            covered += diff.low <= effect <= diff.high
    assert definite / (trials / 2) <= 0.10 + 0.03  # 300 nulls: 10% +- 1.7% (one sd)
    assert covered / (trials / 2) >= 0.87


def test_an_arm_that_would_still_improve_past_the_cap_keeps_its_verdict_and_flags_the_reversal(
    hand_made,
):
    """REPACK < SHUFFLE: SHUFFLE's choice is the cap (4 epochs). Within the cap REPACK is better
    (agrees, SHUFFLE "at cap", not censored); trained past the cap (6 epochs) SHUFFLE improves past
    REPACK, and the past-the-cap verdict says so (disagrees) beside the claim."""
    losses = {}
    for loader, best in (("repack", 2), ("shuffle", 4)):
        for lr, bump in ((1e-3, 0.1), (3e-3, 0.0), (1e-2, 0.1)):
            for epochs in (2, 4):
                losses[(loader, lr, epochs)] = 3.0 + bump + (0.0 if epochs == best else 0.05)
    rng = np.random.default_rng(4)
    for pool in SELECTION:
        for (loader, lr, epochs), loss in losses.items():
            noisy = loss + 0.002 * rng.standard_normal()
            hand_made.add(noisy, pool=pool, loader=loader, lr=lr, epochs=epochs)
    results = hand_made.results()
    runs = results.runs

    def claims(results):
        arms = [arm(results, runs["loader"] == k, (), cap=4) for k in ("repack", "shuffle")]
        diff = compare(*arms)
        return claim_table(
            [Claim("order", "repack < shuffle", "yes", "", lower_verdict([diff]), diff)]
        )

    asking = Confirmation(CONFIRMATION, cap=4)
    claims(replace(results, confirmation=asking))
    assert sorted((f["loader"], f["epochs"]) for f in asking.wanted) == [
        ("repack", 2),
        ("shuffle", 4),
        ("shuffle", 6),
    ]
    effects = {("repack", 2): 0.0, ("shuffle", 4): 0.05, ("shuffle", 6): -0.05}
    confirmed = _confirm(hand_made, asking, effects, 0.01)
    within = claims(replace(results, confirmation=confirmed))
    beyond = claims(replace(results, confirmation=replace(confirmed, past_cap=True)))
    table = with_past_cap(within, beyond)
    row = table.iloc[0]
    assert row["agrees?"] == "agrees" and row["at_cap"] and row["past_cap"] == "disagrees"
    assert shown_claims(table)["past the cap (1.5x)"].tolist() == ["disagrees"]
    assert with_past_cap(within.assign(at_cap=False), beyond)["past_cap"].tolist() == [""]
