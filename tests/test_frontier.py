"""The GPU x time frontier on synthetic curves with known answers."""

import math

import numpy as np
import pandas as pd
import pytest

from repro.analysis.frontier import (
    MeasuredStepTime,
    best_per_batch,
    crossovers,
    deadline_grid,
    eval_costs,
    frontier,
    frontier_claims,
    judged_crossovers,
    latency_speedup,
    ring_allreduce_seconds,
    schedule_policies,
    step_units,
    unit_step_time,
)
from repro.analysis.results import Results, store_documents
from repro.errors import ReproError

VERDICTS = {"agrees", "disagrees", "undetermined"}
TOKENS = np.full(40, 50)  # 40 validation documents of 50 scored tokens
DIFFICULTY = np.random.default_rng(0).normal(0, 0.5, 40)  # shared by every evaluation


def _curves(spec):
    """spec: {run_id: (batch_size, [(step, val_loss), ...])}."""
    runs = pd.DataFrame([{"run_id": r, "batch_size": b} for r, (b, _) in spec.items()])
    evals = pd.DataFrame(
        [{"run_id": r, "step": s, "val_loss": v} for r, (_, pts) in spec.items() for s, v in pts]
    )
    return runs, evals


def test_step_units():
    assert step_units(64, 1, 8) == 8 and step_units(64, 8, 8) == 1 and step_units(64, 16, 8) == 1
    assert step_units(4, 1, 8) == 1 and step_units(9, 1, 8) == 2
    assert (
        step_units(64, 8, 8, allreduce_units=0.25) == 1.25
        and step_units(64, 1, 8, allreduce_units=0.25) == 8
    )


def test_ring_allreduce_units_and_regimes():
    assert ring_allreduce_seconds(1e9, 1) == 0.0
    nvlink = ring_allreduce_seconds(1e9, 8)
    assert nvlink == pytest.approx(2 * 7 / 8 * 1e9 / 450e9 + 14 * 5e-6)
    assert ring_allreduce_seconds(1e9, 16) > 5 * nvlink  # across nodes: InfiniBand


def test_measured_step_time_accumulates_micro_batches():
    st = MeasuredStepTime({1: 1.0, 2: 1.5, 3: 2.0, 4: 2.4}, gradient_bytes=0.0)
    assert (
        st.step_seconds(4, 1) == 2.4
        and st.step_seconds(8, 1) == 4.8
        and st.step_seconds(9, 1) == 5.8
    )
    assert st.step_seconds(8, 2) == pytest.approx(2.4 + 2 * 5e-6) and st.step_seconds(
        1, 4
    ) == pytest.approx(1.0 + 6 * 5e-6)


def test_frontier_known_answer_ties_and_too_short_deadlines():
    # batch 4: many cheap steps, reaches 2.0 at step 100; batch 16: fewer steps, 2.5 at step 10,
    # 2.2 at step 30
    runs, evals = _curves(
        {
            "small": (4, [(10, 3.0), (50, 2.4), (100, 2.0)]),
            "large": (16, [(10, 2.5), (30, 2.2)]),
            "tie": (8, [(25, 2.2)]),
        }
    )
    step = lambda b, g: step_units(b, g, micro_batch=4)  # noqa: E731  units: batch 4 -> 1, 8 -> 2, 16 -> 4 on one GPU
    table = frontier(evals, runs, [1, 4], [5, 40, 50, 120, 400], step).set_index(
        ["gpus", "deadline"]
    )
    assert math.isnan(table.loc[(1, 5), "best_val_loss"])  # shorter than any first evaluation
    assert table.loc[(1, 40), ["best_val_loss", "batch_size"]].tolist() == [
        2.5,
        16,
    ]  # large batch: 10 steps x 4 units
    assert table.loc[(1, 50), ["best_val_loss", "batch_size"]].tolist() == [
        2.2,
        8,
    ]  # tie 2.2: batch 8 (50 units) vs 16 (120): smaller wins
    assert table.loc[(1, 400), ["best_val_loss", "batch_size"]].tolist() == [2.0, 4]
    # with 4 GPUs every batch here costs one unit per step: the large batch reaches 2.2 by T = 30
    assert table.loc[(4, 40), ["best_val_loss", "batch_size"]].tolist() == [2.2, 8]


def _store(tmp_path, spec, noise=0.01):
    """spec: {run_id: (batch_size, [(step, mean loss nats/token), ...])}: runs (model "tiny"),
    evals and RUN/val_docs under tmp_path; each document's summed loss is (mean + its difficulty
    + noise) x its tokens, and val_loss is their mean per token."""
    rng = np.random.default_rng(1)
    difficulty = DIFFICULTY - DIFFICULTY.mean()
    evals = []
    for rid, (_, points) in spec.items():
        folder = tmp_path / rid / "val_docs"
        folder.mkdir(parents=True)
        np.save(folder / "tokens.npy", TOKENS)
        for step, loss in points:
            docs = (loss + difficulty + rng.normal(0, noise, len(TOKENS))) * TOKENS
            np.save(folder / f"step-{step}.npy", docs)
            evals.append({"run_id": rid, "step": step, "val_loss": docs.sum() / TOKENS.sum()})
    runs = pd.DataFrame(
        [{"run_id": r, "batch_size": b, "model": "tiny"} for r, (b, _) in spec.items()]
    )
    return Results(runs, pd.DataFrame(evals), store_documents(tmp_path))


def test_crossover_found_from_data():
    # smaller batch on fewer GPUs wins at a long deadline, loses at a short one
    runs, evals = _curves({"b4": (4, [(20, 3.0), (200, 2.0)]), "b16": (16, [(20, 2.6), (60, 2.4)])})
    step = lambda b, g: step_units(b, g, micro_batch=4)  # noqa: E731
    table = crossovers(evals, runs, [30, 300], step, micro_batch=4).set_index("deadline")
    assert table.loc[30, ["small_gpus", "large_gpus"]].tolist() == [1, 4]
    assert not table.loc[30, "smaller_wins"] and table.loc[300, "smaller_wins"]
    assert np.isclose(table.loc[300, "small_loss"], 2.0) and np.isclose(
        table.loc[300, "large_loss"], 2.4
    )
    # at 300 batch 16 has ended (its last evaluation costs 60 units): not a comparison in time
    assert table.loc[30, "both_training"] and not table.loc[300, "both_training"]
    assert table.loc[30, ["small_run", "small_step", "large_run", "large_step"]].tolist() == [
        "b4",
        20,
        "b16",
        20,
    ]


def test_a_side_is_training_until_its_longest_epoch_budget_ends():
    # batch 16 has a 1-epoch run ending at step 15 and a 2-epoch run ending at step 30
    runs, evals = _curves(
        {
            "b4": (4, [(10, 3.5), (40, 3.0)]),
            "b16-e1": (16, [(15, 2.9)]),
            "b16-e2": (16, [(15, 3.1), (30, 2.8)]),
        }
    )
    table = crossovers(evals, runs, [20, 30], unit_step_time(4), 4).set_index("deadline")
    assert table.loc[20, "both_training"] and not table.loc[30, "both_training"]
    assert table.loc[20, ["large_run", "large_step"]].tolist() == ["b16-e1", 15]
    best = best_per_batch(evals, runs, 4, 30, unit_step_time(4))
    assert best.loc[16, ["run_id", "step", "val_loss"]].tolist() == ["b16-e2", 30, 2.8]


# Batch 2 (1 GPU) and batch 8 (4 GPUs) at micro-batch 2: one step costs one unit for both.
STEP = unit_step_time(2)
DEADLINES = [10, 20, 25, 40, 80, 160]


def _claims(tmp_path, spec, noise=0.01, gpus=4):
    results = _store(tmp_path, spec, noise)
    runs, evals = results.runs, results.evals
    judged = judged_crossovers(crossovers(evals, runs, DEADLINES, STEP, 2), results.documents)
    claims = frontier_claims(results, judged, DEADLINES, STEP, gpus, min_replicates=1)
    one_pool = frontier_claims(results, judged, DEADLINES, STEP, gpus)
    assert set(one_pool["agrees?"]) == {"undetermined"}  # one replicate: no verdict
    assert one_pool.loc[0, "measured here"].endswith("(1 of 3 replicates: no verdict)")
    assert claims.columns.tolist() == ["claim", "paper", "measured here", "agrees?"]
    assert set(claims["agrees?"]) <= VERDICTS
    assert claims.loc[2, "agrees?"] == "undetermined"  # latency: projected only
    return claims, judged


@pytest.mark.parametrize(
    "small,large,verdict",
    [
        # batch 8 leads at T=40 (the tightest deadline reaching both), batch 2 leads at T=160
        ([3.8, 2.8, 2.5], [4.0, 3.5, 3.0], "agrees"),
        # the review's case: the largest batch never learns (the cheapest evaluation is its own)
        ([3.8, 2.8, 2.5], [5.0, 5.0, 5.0], "disagrees"),
        # batch 8 leads at T=40 and still at T=160: the largest batch wins throughout
        ([3.8, 2.8, 2.5], [4.0, 3.5, 2.0], "undetermined"),
        # equal within document noise
        ([3.0, 3.0, 3.0], [3.0, 3.0, 3.0], "undetermined"),
    ],
)
def test_tight_deadlines_claim_in_all_three_directions(tmp_path, small, large, verdict):
    spec = {
        "b2": (2, list(zip([40, 80, 160], small))),
        "b8": (8, list(zip([10, 20, 40], large))),
    }
    claims, _ = _claims(tmp_path, spec, noise=0.5 if verdict == "undetermined" else 0.01)
    assert claims.loc[0, "agrees?"] == verdict
    measured = claims.loc[0, "measured here"]
    assert measured.startswith("model tiny, 4 GPUs: optimal batch")
    if verdict == "agrees":
        assert "T=40: batch 8 - batch 2" in measured and "T=160: batch 2 - batch 8" in measured


def test_tight_deadlines_claim_needs_two_batch_sizes(tmp_path):
    claims, _ = _claims(tmp_path, {"b8": (8, [(10, 4.0), (20, 3.0)])})
    assert claims.loc[0, "agrees?"] == "undetermined"
    assert claims.loc[0, "measured here"].endswith("no deadline reaches two batch sizes")


@pytest.mark.parametrize(
    "small,large,verdict",
    [
        # batch 2 on 1 GPU is lower at T=10, 20, 25 while both train
        ([3.0, 2.5, 2.4], [3.4, 3.2, 3.1], "agrees"),
        # batch 2 wins only at T >= 40, after batch 8 has ended (step 30): not counted
        ([3.8, 3.5, 2.0], [3.4, 3.0, 2.8], "disagrees"),
        ([3.0, 3.0, 3.0], [3.0, 3.0, 3.0], "undetermined"),
    ],
)
def test_smaller_batch_claim_counts_only_deadlines_where_both_train(
    tmp_path, small, large, verdict
):
    spec = {
        "b2": (2, list(zip([10, 20, 80], small))),
        "b8": (8, list(zip([10, 20, 30], large))),
    }
    claims, judged = _claims(tmp_path, spec, noise=0.5 if verdict == "undetermined" else 0.01)
    assert claims.loc[1, "agrees?"] == verdict
    assert judged["deadline"].tolist() == [10, 20, 25]  # batch 8's last evaluation costs 30
    assert judged["level"].iloc[0] == pytest.approx(1 - 0.1 / 2)  # 2 distinct evaluation pairs
    assert (
        "3 (deadline, pair) comparisons with both batches still training"
        in claims.loc[1, "measured here"]
    )


def test_smaller_batch_claim_without_a_shared_training_window(tmp_path):
    # batch 8 ends (step 10) before batch 2's first evaluation (step 20)
    claims, judged = _claims(tmp_path, {"b2": (2, [(20, 2.0)]), "b8": (8, [(10, 3.0)])})
    assert judged.empty and claims.loc[1, "agrees?"] == "undetermined"
    assert "no deadline at which both batches" in claims.loc[1, "measured here"]


def test_frontier_claims_need_one_model_size(tmp_path):
    results = _store(tmp_path, {"a": (2, [(10, 3.0)]), "b": (8, [(10, 3.0)])})
    runs, evals = results.runs, results.evals
    runs.loc[1, "model"] = "cpu-s"
    judged = judged_crossovers(crossovers(evals, runs, DEADLINES, STEP, 2), results.documents)
    with pytest.raises(ReproError, match="one model size"):
        frontier_claims(results, judged, DEADLINES, STEP, 4)


def test_projection_speedup():
    assert (
        latency_speedup(1, 0.5) == 1.0
        and latency_speedup(4, 1.0) == 4.0
        and latency_speedup(4, 0.5) == 2.5
    )
    with pytest.raises(ValueError):
        latency_speedup(2, 1.5)


def test_schedule_runs_are_priced_step_by_step():
    """A run whose batch grows from 2 to 8 at its second evaluation: 10 steps at batch 2, then 10 at
    batch 8."""
    runs = pd.DataFrame({"run_id": ["fixed", "schedule"], "batch_size": [8, 4]})
    evals = pd.DataFrame(
        {
            "run_id": ["fixed", "fixed", "schedule", "schedule"],
            "step": [10, 20, 10, 20],
            "val_loss": [3.0, 2.5, 2.8, 2.4],
            "step_batch": [None, None, 2, 8],
        }
    )
    points = evals.merge(runs, on="run_id")
    units = lambda b, g: step_units(b, g, micro_batch=2)  # noqa: E731
    costs = eval_costs(points, 1, units)
    assert costs.tolist() == [40, 80, 10, 10 + 40]
    table = frontier(evals, runs, [1], [45, 80], units)
    assert table["run_id"].tolist() == ["schedule", "schedule"] and table[
        "best_val_loss"
    ].tolist() == [2.8, 2.4]


def test_unit_step_time_is_step_units_with_the_micro_batch():
    step = unit_step_time(8)
    assert step(64, 1) == 8 and step(64, 8) == 1 and step(4, 2) == 1
    assert unit_step_time(8, allreduce_units=0.5)(64, 8) == 1.5


def test_deadline_grid_spans_the_first_evaluation_on_most_gpus_to_the_last_on_one():
    runs, evals = _curves({"a": (4, [(10, 3.0), (100, 2.0)]), "b": (16, [(5, 3.0), (30, 2.2)])})
    step = unit_step_time(4)  # batch 4: 1 unit on any GPUs; batch 16: 4 units on 1 GPU, 1 on 4
    grid = deadline_grid(evals, runs, [1, 4], step, n=5)
    assert grid[0] == 5.0 and grid[-1] == 120.0  # b's step 5 on 4 GPUs; b's step 30 x 4 on 1
    assert np.all(np.diff(grid) > 0) and len(grid) == 5


def test_schedule_policies_count_deadlines_where_a_schedule_beats_every_fixed_batch():
    runs, evals = _curves({"f": (4, [(10, 3.0), (20, 2.5)])})
    step = unit_step_time(4)
    deadlines = [5.0, 10.0, 20.0]
    table = frontier(evals, runs, [1], deadlines, step)
    schedule_runs = pd.DataFrame({"run_id": ["s"], "batch_size": [4], "batch_schedule": ["0:4"]})
    schedule_evals = pd.DataFrame({"run_id": ["s", "s"], "step": [10, 20], "val_loss": [2.8, 2.6]})
    fronts, summary = schedule_policies(
        table, schedule_runs, schedule_evals, {"flat": "0:4"}, [1], deadlines, step
    )
    assert fronts["policy"].unique().tolist() == ["flat (0:4)"] and len(fronts) == 3
    row = summary.iloc[0]
    assert row["policy"] == "flat" and row["gpus"] == 1
    assert (
        row["deadlines reachable"] == 2 and row["deadlines where it beats every fixed batch"] == 1
    )
