"""The gradient noise scale of notebook 05 (the trainer logs B_simple: repro.runtime.noise_scale):
where it is measured (the tuned runs that the noise-scale runs copy), its trajectory per
evaluation, its growth as the loss falls with intervals over pools, and the preset's noise scale
at the tuned loss (the table Study.summary reads). B_simple near a target loss is
repro.analysis.cbs.b_simple_near.

Units: batch sizes and B_simple are sequences (multiply by seq_len for tokens); losses are
nats/token. The pool is the replicate: intervals are over pools (repro.analysis.cbs.pool_interval).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd

from repro.analysis import selection
from repro.analysis.cbs import FAILED, b_simple_near, physical_range, pool_intervals
from repro.analysis.results import CONFIG_FIELDS, Results, plain_value
from repro.design.presets import pool_label

NOISE_RUN_FIELDS = ("init_from", "save_steps", "noise_scale", "micro_batch", "eval_every")
"""Run fields a noise-scale run sets for itself rather than copying from its tuned run: it trains
from scratch (a WSD branch keeps its warmup_steps, so the schedule is the branch's), keeps no
checkpoints, and logs the noise scale from micro-batches at its own evaluation interval."""


def noise_scale_choices(sweep: Results, batch_sizes: Iterable[int]) -> list[dict]:
    """Where notebook 05 measures the noise scale: per pool of `sweep` (one model's batch sweep)
    and each of `batch_sizes` (sequences) it has, the run fields of the batch's tuned run (lr,
    weight decay and epoch budget chosen on all of the pool's documents, as the growth chooses:
    selection.tuned), less NOISE_RUN_FIELDS, so that a noise-scale run with those fields reaches
    the loss of the tuned endpoint. A batch with no finished run on a pool has no choice there."""
    if sweep.runs.empty:
        return []
    done = sweep.subset(sweep.runs["status"] == "done")
    done = done.subset(done.runs["batch_size"].isin(list(batch_sizes)))
    if done.runs.empty:
        return []
    group_by = ["pool", "model", "batch_size", *(["seed"] if "seed" in done.runs else [])]
    ends = selection.tuned(done, group_by).dropna(subset=["run_id"])
    runs = done.runs.set_index("run_id")
    copied = [f for f in CONFIG_FIELDS if f in runs and f not in NOISE_RUN_FIELDS]
    return [
        {f: plain_value(runs.loc[rid, f]) for f in copied}
        for rid in ends.sort_values(group_by)["run_id"]
    ]


def noise_runs(noise: Results) -> pd.DataFrame:
    """One row per noise-scale run of `noise`: pool (pool_label), batch size (sequences), its
    tuned lr, weight decay and epoch budget, its last val loss (nats/token) and how many of its
    evaluations have a B_simple estimate."""
    evals = noise.evals.sort_values("step")
    last = evals.groupby("run_id")["val_loss"].last()
    estimates = evals.groupby("run_id")["b_simple"].count()
    runs = noise.runs.sort_values(["pool", "batch_size"])
    return pd.DataFrame(
        {
            "pool": [pool_label(p) for p in runs["pool"]],
            "batch size": runs["batch_size"].to_numpy(),
            "lr": runs["lr"].to_numpy(),
            "weight decay": runs["weight_decay"].to_numpy(),
            "epochs": runs["epochs"].to_numpy(),
            "last val loss": last.reindex(runs["run_id"]).round(4).to_numpy(),
            "B_simple estimates": estimates.reindex(runs["run_id"])
            .fillna(0)
            .astype(int)
            .to_numpy(),
        }
    )


def noise_trajectory(noise: Results) -> pd.DataFrame:
    """B_simple (sequences) per evaluation of the noise-scale runs (`noise`): pool, batch_size,
    epoch, tokens, val_loss, b_simple, in pool, batch, then token order."""
    columns = ["pool", "batch_size", "epoch", "tokens", "val_loss", "b_simple"]
    merged = noise.evals.merge(noise.runs[["run_id", "pool", "batch_size"]], on="run_id")
    return merged[columns].sort_values(["pool", "batch_size", "tokens"], ignore_index=True)


def noise_growth(trajectory: pd.DataFrame) -> pd.DataFrame:
    """Per pool and noise-scale batch, over its evaluations up to the best val loss (where the loss
    falls): the median B_simple (sequences) of the first and of the last third, their ratio (NaN
    with fewer than two evaluations), and the val loss (nats/token) at both ends; a median that is
    not positive is no noise scale: NaN, named in FAILED ("B_simple < 0 (first third)")."""
    rows = []
    points = trajectory.dropna(subset=["b_simple", "val_loss"])
    for (pool, batch), run in points.groupby(["pool", "batch_size"]):
        run = run.sort_values("tokens")
        falling = run.iloc[: int(np.argmin(run["val_loss"].to_numpy())) + 1]
        k = max(1, len(falling) // 3)
        ends = {
            end: physical_range({"B_simple": float(falling["b_simple"].iloc[part].median())})
            for end, part in (("first", slice(None, k)), ("last", slice(-k, None)))
        }
        first, last = ends["first"]["B_simple"], ends["last"]["B_simple"]
        failed = [f"{e[FAILED]} ({end} third)" for end, e in ends.items() if e[FAILED]]
        rows.append(
            {
                "pool": pool,
                "batch_size": batch,
                "evaluations": len(falling),
                "B_simple first": first,
                "B_simple last": last,
                "ratio": last / first if len(falling) >= 2 else np.nan,
                "val loss first": float(falling["val_loss"].iloc[0]),
                "val loss last": float(falling["val_loss"].iloc[-1]),
                FAILED: "; ".join(failed),
            }
        )
    return pd.DataFrame(rows)


def growth_intervals(growth: pd.DataFrame) -> pd.DataFrame:
    """Per noise-scale batch: the geometric mean over pools of B_simple's growth (noise_growth's
    ratio) with its 90% interval over pools (pool_intervals)."""
    if growth.empty:
        growth = pd.DataFrame(columns=["pool", "batch_size", "ratio"])
    return pool_intervals(growth, ["batch_size"], {"ratio": True})


NOISE_SCALE_TABLE = "05_noise_scale_regime"
"""The name of notebook 05's table of the preset's noise scale (noise_scale_regime), saved as
figures/<preset>/<name>.csv and read by Study.summary."""


def noise_scale_regime(
    trajectory: pd.DataFrame, endpoints: pd.DataFrame, batch_sizes: Iterable[int], seq_len: int
) -> pd.DataFrame:
    """The preset's gradient noise scale per pool: B_simple at the loss its tuned endpoint reaches.
    That loss ("target", nats/token) is the best tuned val loss of `endpoints` (one model's
    held-out endpoints per pool and batch size, analyses.batch_endpoints): the lowest mean over
    pools among its batch sizes, the same on every pool (they share the validation documents).
    Per pool of `trajectory` (noise_trajectory), b_simple_near the target: the median over the
    pool's noise-scale runs of B_simple at each run's evaluation nearest the target (nearest, not
    interpolated: the logged EMA estimate itself), with the largest |val loss - target| of those
    evaluations ("loss gap"). B_simple in sequences and in tokens (sequences x `seq_len`), and
    the smallest and largest of `batch_sizes` (sequences) over it; a B_simple that is not
    positive is NaN, named in FAILED (physical_range)."""
    target = float(endpoints.groupby("batch_size")["val_loss"].mean().min())
    smallest, largest = min(batch_sizes), max(batch_sizes)
    rows = []
    for pool, noise in trajectory.groupby("pool"):
        b_simple, gap = b_simple_near(noise, target)
        checked = physical_range({"B_simple": b_simple})
        b_simple = checked["B_simple"]
        rows.append(
            {
                "pool": pool_label(pool),
                "target": target,
                "loss gap": gap,
                "B_simple (sequences)": b_simple,
                "B_simple (tokens)": b_simple * seq_len,
                "smallest batch / B_simple": smallest / b_simple,
                "largest batch / B_simple": largest / b_simple,
                FAILED: checked[FAILED],
            }
        )
    return pd.DataFrame(rows)


def noise_scale_range(table: pd.DataFrame) -> tuple[float, float] | None:
    """The lowest and highest B_simple (tokens) over the pools of `table` (noise_scale_regime, or
    its saved CSV), None where no pool has a positive one."""
    tokens = table["B_simple (tokens)"].astype(float)
    tokens = tokens[np.isfinite(tokens) & (tokens > 0)]
    return (float(tokens.min()), float(tokens.max())) if len(tokens) else None


def noise_scale_gap(table: pd.DataFrame) -> float:
    """The largest loss gap (nats/token) over the pools of `table` (noise_scale_regime, or its
    saved CSV) that have a positive B_simple: how far from the tuned loss the B_simple of
    noise_scale_range was measured; NaN where no pool has one."""
    tokens = table["B_simple (tokens)"].astype(float)
    measured = np.isfinite(tokens) & (tokens > 0)
    return float(table.loc[measured, "loss gap"].max()) if measured.any() else math.nan
