"""Held-out selection: a choice is never scored on the documents or the runs that chose it."""

import numpy as np
import pandas as pd
import pytest

from repro.analysis.intervals import describe, lower_verdict
from repro.analysis.results import MemoryDocuments, Results, check_finished
from repro.analysis.selection import compare, cross_fit, describe_tuned, selection_halves, tuned
from repro.errors import ReproError

TOKENS = np.full(40, 100)
LOADERS = ("repack", "shuffle")
POOLS = ("p0", "p1", "p2")


def _candidates(losses: dict[str, np.ndarray]) -> dict:
    return {(name,): (name, value) for name, value in losses.items()}


def test_each_half_is_scored_with_the_run_chosen_on_the_other_half():
    even, odd = selection_halves(40)
    lucky_even = np.where(even, 2.0, 4.0) * TOKENS  # best on even documents, worst on odd ones
    steady = np.full(40, 3.0) * TOKENS
    mine = _candidates({"lucky": lucky_even, "steady": steady})
    reported, chosen, held_out = cross_fit(mine, [], TOKENS)
    assert chosen == ["lucky", "steady"] and not held_out
    # odd documents carry lucky's (bad) losses, even documents steady's
    assert np.array_equal(reported, np.where(even, 3.0, 4.0) * TOKENS)


def test_cross_fitting_removes_the_bonus_of_picking_the_luckiest_of_many_runs():
    """50 equally good runs (true loss 3.0) with per-document noise: the minimum over all
    documents is biased low; the cross-fitted loss is not."""
    naive, honest = [], []
    for seed in range(30):
        rng = np.random.default_rng(seed)
        runs = {str(i): (3.0 + 0.1 * rng.standard_normal(40)) * TOKENS for i in range(50)}
        naive.append(min(r.sum() / TOKENS.sum() for r in runs.values()))
        reported, _, _ = cross_fit(_candidates(runs), [], TOKENS)
        honest.append(reported.sum() / TOKENS.sum())
    assert np.mean(naive) < 2.97
    assert np.mean(honest) == pytest.approx(3.0, abs=0.01)


def test_choosing_on_other_replicates_removes_the_bonus_of_a_lucky_run():
    """20 equally good configurations whose runs are each off by a run-level shift (seed, pool)
    that every document shares: choosing on the replicate's own other half keeps that luck, the
    other replicates' choice does not."""
    own, held_out = [], []
    for seed in range(30):
        rng = np.random.default_rng(seed)
        replicates = [
            _candidates(
                {
                    str(i): (3.0 + 0.05 * rng.standard_normal() + 0.01 * rng.standard_normal(40))
                    * TOKENS
                    for i in range(20)
                }
            )
            for _ in range(3)
        ]
        own.append(cross_fit(replicates[0], [], TOKENS)[0].sum() / TOKENS.sum())
        reported, _, shared = cross_fit(replicates[0], replicates[1:], TOKENS)
        held_out.append(reported.sum() / TOKENS.sum())
        assert shared
    assert np.mean(own) < 2.95
    assert np.mean(held_out) == pytest.approx(3.0, abs=0.02)


def test_tuned_reports_choices_edges_censoring_and_the_within_run_best(hand_made):
    for lr, epochs, loss in ((1e-3, 2, 3.3), (1e-3, 4, 3.1), (3e-3, 2, 3.2), (3e-3, 4, 3.0)):
        hand_made.add(loss, lr=lr, epochs=epochs)
    hand_made.add(2.0, status="diverged")  # never a candidate, but counted
    row = tuned(hand_made.results(), ["pool"]).iloc[0]
    assert (row["lr"], row["epochs"], row["n_runs"], row["n_diverged"]) == (3e-3, 4, 5, 1)
    assert row["at_largest_budget"] and "lr=0.003 is not bracketed: no run at 0.009" in row["edge"]
    assert row["val_loss"] == pytest.approx(3.0, abs=0.01)
    assert row["early_stop_epoch"] == 4  # hand-made curves improve to their end


def test_compare_pairs_documents_and_reports_each_pool(hand_made):
    for pool, (a, b) in {"p0": (3.0, 3.1), "p1": (3.0, 3.05), "p2": (3.0, 3.08)}.items():
        hand_made.add(a, pool=pool, loader="repack")
        hand_made.add(b, pool=pool, loader="shuffle")
    ends = tuned(hand_made.results(), ["pool", "loader"])
    diff = compare(ends[ends["loader"] == "repack"], ends[ends["loader"] == "shuffle"])
    assert diff.value == pytest.approx(-0.0767, abs=0.005)
    assert diff.low < diff.value < diff.high < 0
    assert [round(d, 2) for d in diff.per_replicate] == [-0.1, -0.05, -0.08]
    two = compare(*(ends[(ends["loader"] == k) & (ends["pool"] != "p2")] for k in LOADERS))
    assert two.low < 0 < two.high  # two replicates 0.05 apart: t with 1 degree of freedom


def test_an_arm_whose_lr_is_not_bracketed_counts_as_censored(hand_made):
    """Its loss might still fall past the grid: compare flags it, so it cannot be found worse,
    even with its budget at the study's cap (every run here trains the one budget, 4 epochs)."""
    for lr, loss in ((1e-3, 3.2), (3e-3, 3.1)):  # best at the top: nothing tried above
        hand_made.add(loss, loader="repack", lr=lr)
    for lr, loss in ((1e-3, 3.1), (3e-3, 3.0), (9e-3, 3.05)):  # bracketed
        hand_made.add(loss, loader="shuffle", lr=lr)
    ends = tuned(hand_made.results(), ["pool", "loader"], cap=4).set_index("loader")
    assert not ends.loc["repack", "bracketed"] and ends.loc["shuffle", "bracketed"]
    assert ends["at_cap"].all()
    ends = ends.reset_index()
    diff = compare(ends[ends["loader"] == "repack"], ends[ends["loader"] == "shuffle"])
    assert diff.value > 0 and diff.censored == (True, False) and diff.at_cap == (True, True)


def _two_arms(hand_made, shift: float, late: str) -> Results:
    """REPACK `shift` nats/token above SHUFFLE on 3 pools, each arm tried at 4 and 8 epochs: the
    `late` arm is best at 8 (the largest tried), the other at 4."""
    for pool in POOLS:
        for loader in LOADERS:
            loss = 3.0 + (shift if loader == "repack" else 0.0)
            at8, at4 = (loss, loss + 0.05) if loader == late else (loss + 0.05, loss)
            hand_made.add(at4, pool=pool, loader=loader, epochs=4)
            hand_made.add(at8, pool=pool, loader=loader, epochs=8)
    return hand_made.results()


@pytest.mark.parametrize(
    "shift, late, verdict, arm",
    [
        (-0.1, "shuffle", "agrees", "second arm"),  # the worse arm is best at the largest budget
        (0.1, "repack", "disagrees", "first arm"),
        (0.0, "repack", "undetermined", "first arm"),
    ],
)
def test_an_arm_best_at_the_cap_gets_a_verdict_one_below_the_cap_does_not(
    hand_made, shift, late, verdict, arm
):
    """The worse arm is best at 8 epochs, the largest budget tried: with the study's cap at 8 its
    loss cannot fall within the budgets the claim is stated for ("at cap", a definite verdict; no
    grid edge to widen); with the cap at 16 it might (censored: it cannot be the one found
    worse)."""
    results = _two_arms(hand_made, shift, late)
    verdicts, texts, edges = {}, {}, {}
    for cap in (8, 16):
        ends = tuned(results, ["pool", "loader"], cap=cap)
        assert ends.loc[ends["loader"] == late, "at_largest_budget"].all()
        edges[cap] = set(ends.loc[ends["loader"] == late, "edge"])
        diff = compare(*(ends[ends["loader"] == k] for k in LOADERS))
        verdicts[cap], texts[cap] = lower_verdict([diff]), describe("repack - shuffle", diff)
    assert verdicts == {8: verdict, 16: "undetermined"}
    assert edges == {8: {""}, 16: {"epochs=8 is on the edge of [4, 8]"}}
    assert texts[8].endswith(f"(at cap: {arm})") and "censored" not in texts[8]
    assert texts[16].endswith(f"(censored: {arm})") and "at cap" not in texts[16]


def test_an_lr_is_bracketed_within_its_own_batch_when_the_batch_is_tuned_too(hand_made):
    """Each batch has its own lr ladder: the neighbours of the chosen lr are its batch's."""
    for lr, loss in ((1e-3, 3.1), (2e-3, 3.0), (4e-3, 3.1)):
        hand_made.add(loss, batch_size=2, lr=lr)
    for lr in (3e-3, 6e-3, 1.2e-2):
        hand_made.add(3.2, batch_size=8, lr=lr)
    row = tuned(hand_made.results(), ["pool"], ("batch_size", "lr", "epochs")).iloc[0]
    assert (row["batch_size"], row["lr"], row["bracketed"]) == (2, 2e-3, True)
    assert row["edge"] == "batch_size=2 is on the edge of [2, 8]"  # no lr note


def _finished(hand_made):
    hand_made.add(3.0)
    hand_made.add(3.1, lr=3e-3)
    results = hand_made.results()
    return Results(results.runs.assign(final_step=100), results.evals, results.documents)


def test_the_analysis_refuses_runs_that_are_not_finished_or_not_consistent(hand_made):
    results = _finished(hand_made)
    check_finished(results)  # both done, last evaluation at step 100, documents agree
    running = Results(
        results.runs.assign(status=["done", "running"]), results.evals, results.documents
    )
    with pytest.raises(ReproError, match="run run2 is running"):
        check_finished(running)
    torn = Results(results.runs, results.evals[results.evals["step"] < 100], results.documents)
    with pytest.raises(ReproError, match="not at the step status.json records"):
        check_finished(torn)
    scaled = {key: (losses * 0.5, tokens) for key, (losses, tokens) in hand_made.documents.items()}
    damaged = Results(results.runs, results.evals, MemoryDocuments(scaled))
    with pytest.raises(ReproError, match="val_docs is damaged"):
        check_finished(damaged)


def test_seeds_on_one_pool_are_not_independent_replicates(hand_made):
    """2 pools x 2 seeds: the seeds of a pool are averaged, so 2 replicates count (no verdict)
    and each endpoint's choice is made on the other pool only."""
    for pool, shift in (("p0", -0.1), ("p1", -0.05)):
        for seed in (0, 1):
            hand_made.add(3.0 + shift, pool=pool, seed=seed, loader="repack")
            hand_made.add(3.0, pool=pool, seed=seed, loader="shuffle")
    ends = tuned(hand_made.results(), ["pool", "seed", "loader"])
    diff = compare(*(ends[ends["loader"] == k] for k in LOADERS))
    assert len(diff.per_replicate) == 2 and diff.value == pytest.approx(-0.075, abs=0.005)


def test_runs_that_share_every_tuned_value_are_an_error(hand_made):
    hand_made.add(3.0, schedule="cosine")
    hand_made.add(3.1, schedule="wsd")
    with pytest.raises(ReproError, match="share every tuned value"):
        tuned(hand_made.results(), ["pool"])


def test_an_arm_whose_every_run_diverged_has_the_endpoint_columns_and_compares_as_unmeasured(
    hand_made,
):
    for pool in ("p0", "p1", "p2"):
        hand_made.add(3.0, pool=pool, batch_size=1, status="diverged")
        hand_made.add(3.0, pool=pool, batch_size=4)
    results = hand_made.results()
    fields = ["pool", "seed", "batch_size"]
    ends = tuned(results, fields)
    diverged = ends[ends["batch_size"] == 1]
    assert diverged[["val_loss", "train_loss", "run_id", "epochs"]].isna().all().all()
    alone = tuned(results.subset(results.runs["batch_size"] == 1), fields)
    assert {"train_loss", "at_largest_budget", "bracketed", "lr", "epochs"} <= set(alone)
    done = tuned(results.subset(results.runs["batch_size"] == 4), fields)
    assert np.isnan(compare(alone, done).value)


def test_describe_tuned_fits_120_columns_with_pool_names_and_summarised_warnings():
    """`repro sweep table`'s text: no line over 120 characters however many fields vary, pools by
    their readable names (presets.pool_label), one warning line counting the groups on a grid's
    edge and at most three examples."""
    rows = [
        {
            "model": "cpu-xs",
            "batch_size": batch,
            "adam_beta2": 0.9984,
            "pool": f"/a/long/path/to/pools/cpu-regime-synthetic_max_sentences_20-seed{seed}",
            "n_runs": 6,
            "val_loss": 2.1234567,
            "train_loss": 1.9,
            "lr": 0.0042,
            "weight_decay": 1.0,
            "epochs": 8,
            "early_stop_val_loss": 2.11,
            "edge": "weight_decay=1 is not bracketed: no run at 10 beside it" * (batch == 64),
            "run_id": "x" * 12,
        }
        for seed in (0, 1, 2)
        for batch in (64, 128)
    ]
    text, warnings = describe_tuned(pd.DataFrame(rows), ["pool", "model", "batch_size"])
    assert max(len(line) for line in text.splitlines() + warnings) <= 120
    assert "pool 0" in text and "seed0" not in text and "/a/long" not in text
    assert "run_id" not in text
    assert warnings[0].startswith("warning: 3 of 6 groups") and len(warnings) == 4
    assert warnings[1].startswith("  pool=pool 0, model=cpu-xs, batch=64: weight_decay=1")
    rows = [dict(row, edge="") for row in rows]
    assert describe_tuned(pd.DataFrame(rows), ["pool"])[1] == []
