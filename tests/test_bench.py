"""The benchmarks run, on tiny shapes, and measure what they say they measure."""

import math

import pytest

from repro.bench import measure as bench

pytestmark = pytest.mark.slow  # trains or analyses whole studies: CI runs it, `pytest` skips it


def test_stacked_rows_compare_each_stack_size_with_sequential_runs():
    rows = bench.stacked_vs_sequential("tiny", 300, 16, [1], [2, 3], [1], rounds=1)
    assert [(r["stack"], r["batch_size"], r["threads"]) for r in rows] == [(2, 1, 1), (3, 1, 1)]
    assert rows[0]["sequential_tokens_per_s"] == rows[1]["sequential_tokens_per_s"]
    assert all(
        r["speedup"] == pytest.approx(r["stacked_tokens_per_s"] / r["sequential_tokens_per_s"])
        for r in rows
    )


@pytest.mark.parametrize("option", ["bf16", "compile"])
def test_side_by_side_measures_the_option(option):
    (row,) = bench.side_by_side("tiny", 300, 16, [2], option, rounds=1)
    assert row["option"] == option and row["tokens_per_s_with"] > 0
    assert row["ratio"] == pytest.approx(row["tokens_per_s_with"] / row["tokens_per_s_without"])


def test_bf16_loss_gap_trains_in_bf16(synthetic_pool):
    gap = bench.bf16_loss_gap(str(synthetic_pool), "tiny", 8, 1, 0)
    losses = gap["val_loss"]
    assert all(math.isfinite(v) and 3 < v < 7 for v in losses.values())
    assert losses["bf16"] != losses["fp32"]  # autocast really changed the arithmetic
    assert gap["bf16_minus_fp32"] == losses["bf16"] - losses["fp32"]
