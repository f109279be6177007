"""The GPU x time frontier on synthetic curves with known answers."""

import math

import numpy as np
import pandas as pd
import pytest

from repro.analysis.frontier import (
    MeasuredStepTime,
    best_per_batch,
    deadline_grid,
    eval_costs,
    frontier,
    latency_speedup,
    over_pools,
    pool_frontiers,
    ring_allreduce_seconds,
    schedule_policies,
    step_units,
    unit_step_time,
)
from repro.analysis.intervals import LEVEL, t_interval
from repro.analysis.results import MemoryDocuments, Results


def _curves(spec):
    """spec: {run_id: (batch_size, [(step, val_loss), ...])}."""
    runs = pd.DataFrame([{"run_id": r, "batch_size": b} for r, (b, _) in spec.items()])
    evals = pd.DataFrame(
        [{"run_id": r, "step": s, "val_loss": v} for r, (_, pts) in spec.items() for s, v in pts]
    )
    return runs, evals


def _results(runs: pd.DataFrame, evals: pd.DataFrame) -> Results:
    """Hand-made runs and evaluations, without per-document losses."""
    return Results(runs, evals, MemoryDocuments({}))


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
    table = frontier(_results(runs, evals), [1, 4], [5, 40, 50, 120, 400], step).set_index(
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


def test_the_best_point_within_a_deadline_takes_every_epoch_budget():
    # batch 16 has a 1-epoch run ending at step 15 and a 2-epoch run ending at step 30
    runs, evals = _curves(
        {
            "b4": (4, [(10, 3.5), (40, 3.0)]),
            "b16-e1": (16, [(15, 2.9)]),
            "b16-e2": (16, [(15, 3.1), (30, 2.8)]),
        }
    )
    best = best_per_batch(_results(runs, evals), 4, 20, unit_step_time(4))
    assert best.loc[16, ["run_id", "step", "val_loss"]].tolist() == ["b16-e1", 15, 2.9]
    best = best_per_batch(_results(runs, evals), 4, 30, unit_step_time(4))
    assert best.loc[16, ["run_id", "step", "val_loss"]].tolist() == ["b16-e2", 30, 2.8]


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
    table = frontier(_results(runs, evals), [1], [45, 80], units)
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
    grid = deadline_grid(_results(runs, evals), [1, 4], step, n=5)
    assert grid[0] == 5.0 and grid[-1] == 120.0  # b's step 5 on 4 GPUs; b's step 30 x 4 on 1
    assert np.all(np.diff(grid) > 0) and len(grid) == 5


def _pooled(runs: pd.DataFrame, evals: pd.DataFrame, pools: dict[str, str]) -> Results:
    """_results with each run on its pool (`pools`: run_id -> pool folder)."""
    return _results(runs.assign(pool=runs["run_id"].map(pools)), evals)


POOL_DIRS = ("/pools/tiny-synthetic-seed0", "/pools/tiny-synthetic-seed1")  # "pool 0", "pool 1"


def test_schedule_policies_count_deadlines_where_a_schedule_beats_every_fixed_batch():
    """Each pool's schedule against that pool's best fixed batch: on pool 0 the schedule (2.8,
    2.6) beats the fixed batch at its first evaluation (3.0) but not at its second (2.5); on pool
    1 the fixed batch (2.7, 2.4) is better at both."""
    runs, evals = _curves({"f0": (4, [(10, 3.0), (20, 2.5)]), "f1": (4, [(10, 2.7), (20, 2.4)])})
    step = unit_step_time(4)
    deadlines = [5.0, 10.0, 20.0]
    fixed = pool_frontiers(
        _pooled(runs, evals, dict(zip(["f0", "f1"], POOL_DIRS))), [1], deadlines, step
    )
    assert fixed["pool"].tolist() == [POOL_DIRS[0]] * 3 + [POOL_DIRS[1]] * 3
    schedule_runs = pd.DataFrame(
        {"run_id": ["s0", "s1"], "batch_size": [4, 4], "batch_schedule": ["0:4", "0:4"]}
    )
    schedule_evals = pd.DataFrame(
        {"run_id": ["s0", "s0", "s1", "s1"], "step": [10, 20] * 2, "val_loss": [2.8, 2.6] * 2}
    )
    scheduled = _pooled(schedule_runs, schedule_evals, dict(zip(["s0", "s1"], POOL_DIRS)))
    fronts, summary = schedule_policies(fixed, scheduled, {"flat": "0:4"}, [1], deadlines, step)
    assert fronts["policy"].unique().tolist() == ["flat: batch 4"] and len(fronts) == 2 * 3
    assert fronts["pool"].tolist() == [POOL_DIRS[0]] * 3 + [POOL_DIRS[1]] * 3
    assert fronts["run_id"].dropna().tolist() == ["s0", "s0", "s1", "s1"]  # each pool's own run
    assert summary["policy"].tolist() == ["flat", "flat"] and (summary["gpus"] == 1).all()
    assert summary["pool"].tolist() == ["pool 0", "pool 1"]
    assert summary["deadlines reachable"].tolist() == [2, 2]
    assert summary["deadlines where it beats every fixed batch"].tolist() == [1, 0]


def test_over_pools_is_a_t_interval_over_pools_where_every_pool_reaches_the_deadline():
    """Pool 0 reaches 3.0 by deadline 10 and 2.5 by 20; pool 1 only 2.7 by 20: deadline 10 is
    left out (one pool only), deadline 20 has the mean 2.6 and the 90% t interval of (2.5, 2.7)."""
    runs, evals = _curves({"a": (4, [(10, 3.0), (20, 2.5)]), "b": (4, [(20, 2.7)])})
    results = _pooled(runs, evals, dict(zip("ab", POOL_DIRS)))
    fronts = pool_frontiers(results, [1, 2], [5.0, 10.0, 20.0], unit_step_time(4))
    means = over_pools(fronts, ["gpus"])
    assert means[["gpus", "deadline"]].values.tolist() == [[1, 20.0], [2, 20.0]]
    expected = t_interval([2.5, 2.7], LEVEL)
    assert means["mean"].tolist() == pytest.approx([2.6, 2.6])
    assert means["low"].tolist() == pytest.approx([expected.low] * 2)
    assert means["high"].tolist() == pytest.approx([expected.high] * 2)
    assert expected.low < 2.5 and expected.high > 2.7 and (means["pools"] == 2).all()
    one = over_pools(fronts[fronts["pool"] == POOL_DIRS[0]], ["gpus"])
    assert one["deadline"].tolist() == [10.0, 20.0, 10.0, 20.0]  # one pool: every deadline it
    assert one["mean"].tolist() == [3.0, 2.5, 3.0, 2.5]  # reaches, without an interval
    assert one[["low", "high"]].isna().all().all()
