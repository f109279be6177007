"""GPUs and wall-clock time as separate resources.

A small batch needs many sequential optimizer steps, and more GPUs do not shorten that chain. We
price a training run by the time of its steps:

- idealised model, in *step units*: one GPU processes `micro_batch` sequences per unit, so a step of
  batch B (sequences) on G GPUs costs max(1, ceil(B / (G * micro_batch))) units, plus an optional
  all-reduce term (units per step, when G > 1);
- measured model, in *seconds*: `repro bench step-time` times forward + backward + optimizer for
  micro-batches 1..m on this device; a step of B on G GPUs runs ceil(B / (G m)) micro-batches of at
  most m sequences, plus a ring all-reduce of the gradients (alpha-beta model, defaults below).

The frontier is computed from *observed* curves (never from fitted ones): for a GPU count G and a
deadline T, the best validation loss reachable is the minimum over runs (any batch size, tuned or
not) and their evaluation points whose cumulative step time fits in T.

Latency-oriented parallelism (tensor / sequence / pipeline style) is only *projected*: k GPUs per
replica shorten a step to step_time / (1 + efficiency * (k - 1)) without changing the batch.

The claims are held out on replicates (repro.analysis.deadline_claims); the frontier here is
descriptive: in-sample minima of one pool's observed curves.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from repro.analysis.batch_schedules import schedule_words
from repro.analysis.intervals import LEVEL, t_interval
from repro.analysis.results import Results
from repro.design.presets import pool_label

# Link defaults for the ring all-reduce (per direction): NVLink 4 (H100/H200 within a node) and
# NDR InfiniBand (400 Gb/s per GPU across nodes).
NVLINK_BANDWIDTH_BYTES_PER_S = 450e9
NVLINK_LATENCY_S = 5e-6
INFINIBAND_BANDWIDTH_BYTES_PER_S = 50e9
INFINIBAND_LATENCY_S = 10e-6
GPUS_PER_NODE = 8


def step_units(batch_size: int, gpus: int, micro_batch: int, allreduce_units: float = 0.0) -> float:
    """Idealised time of one optimizer step, in units of one micro-batch forward+backward on one
    GPU."""
    return max(1, math.ceil(batch_size / (gpus * micro_batch))) + (
        allreduce_units if gpus > 1 else 0.0
    )


def ring_allreduce_seconds(n_bytes: float, gpus: int, gpus_per_node: int = GPUS_PER_NODE) -> float:
    """Alpha-beta ring all-reduce: 2 (G-1)/G * bytes / bandwidth + 2 (G-1) * latency, over NVLink
    inside one node and InfiniBand once the ring spans nodes."""
    if gpus <= 1:
        return 0.0
    bandwidth, latency = (
        (NVLINK_BANDWIDTH_BYTES_PER_S, NVLINK_LATENCY_S)
        if gpus <= gpus_per_node
        else (INFINIBAND_BANDWIDTH_BYTES_PER_S, INFINIBAND_LATENCY_S)
    )
    return 2 * (gpus - 1) / gpus * n_bytes / bandwidth + 2 * (gpus - 1) * latency


@dataclass(frozen=True)
class MeasuredStepTime:
    """Seconds per forward+backward+optimizer step for every micro-batch 1..m
    (`repro bench step-time`)."""

    seconds_by_micro_batch: dict[int, float]
    gradient_bytes: float  # bytes all-reduced per step (parameters x bytes per gradient element)

    def step_seconds(self, batch_size: int, gpus: int) -> float:
        """A step of `batch_size` sequences on `gpus` GPUs: accumulation over the largest measured
        micro-batch."""
        per_gpu = math.ceil(batch_size / gpus)
        m = max(self.seconds_by_micro_batch)
        full, rest = divmod(per_gpu, m)
        compute = full * self.seconds_by_micro_batch[m] + (
            self.seconds_by_micro_batch[rest] if rest else 0.0
        )
        return compute + ring_allreduce_seconds(self.gradient_bytes, gpus)


def step_time_table(batch_sizes, gpu_counts, step_time) -> pd.DataFrame:
    """Step time (units of `step_time`) for every batch size x GPU count; `step_time(B, G)`."""
    return pd.DataFrame(
        [
            {"batch_size": b, "gpus": g, "step_time": step_time(b, g)}
            for b in batch_sizes
            for g in gpu_counts
        ]
    )


def eval_costs(points: pd.DataFrame, gpus: int, step_time) -> pd.Series:
    """Time of each evaluation point on `gpus` GPUs: the steps before it, each priced at its batch
    size (`batch_size` of the run, or `step_batch` of the evaluation for a batch-size schedule,
    whose batch changes only at epoch ends, where an evaluation always falls). Index aligned with
    `points`."""
    cost = points["step"] * points["batch_size"].map(lambda b: step_time(int(b), gpus))
    if "step_batch" not in points or points["step_batch"].isna().all():
        return cost
    scheduled = points[points["step_batch"].notna()].sort_values(
        ["run_id", "step"], kind="mergesort"
    )
    steps = scheduled.groupby("run_id")["step"].diff().fillna(scheduled["step"])
    cost.loc[scheduled.index] = (
        (steps * scheduled["step_batch"].map(lambda b: step_time(int(b), gpus)))
        .groupby(scheduled["run_id"])
        .cumsum()
    )
    return cost


def _points(results: Results) -> pd.DataFrame:
    """Evaluation points with a loss, with their run's batch size."""
    points = results.evals.dropna(subset=["val_loss"])
    return points.merge(results.runs[["run_id", "batch_size"]], on="run_id")


def frontier(
    results: Results, gpu_counts, deadlines, step_time, speedup: float = 1.0
) -> pd.DataFrame:
    """Best observed validation loss per (GPUs, deadline), with the batch size and run that reach
    it.

    Every evaluation of `results` with a loss is a point. An evaluation point at step s
    of a run with batch B costs s * step_time(B, G) / speedup (a batch-size schedule: eval_costs).
    Deadlines shorter than every run's first evaluation give NaN loss (nothing is reachable). Ties
    go to the smaller batch, then the earlier step.
    """
    points = _points(results)
    rows = []
    for g in gpu_counts:
        cost = eval_costs(points, g, step_time) / speedup
        ranked = points.assign(time=cost).sort_values(
            ["val_loss", "batch_size", "step"], kind="mergesort"
        )
        for t in deadlines:
            feasible = ranked[ranked["time"] <= t]
            if feasible.empty:
                rows.append(
                    {
                        "gpus": g,
                        "deadline": t,
                        "best_val_loss": np.nan,
                        "batch_size": np.nan,
                        "run_id": None,
                        "time": np.nan,
                    }
                )
                continue
            best = feasible.iloc[0]
            rows.append(
                {
                    "gpus": g,
                    "deadline": t,
                    "best_val_loss": best["val_loss"],
                    "batch_size": int(best["batch_size"]),
                    "run_id": best["run_id"],
                    "time": best["time"],
                }
            )
    return pd.DataFrame(rows)


def pool_frontiers(results: Results, gpu_counts, deadlines, step_time) -> pd.DataFrame:
    """frontier of each pool of `results` alone (the pool is the replicate), with a `pool`
    column."""
    return pd.concat(
        [
            frontier(
                results.subset(results.runs["pool"] == pool), gpu_counts, deadlines, step_time
            ).assign(pool=pool)
            for pool in sorted(results.runs["pool"].unique())
        ],
        ignore_index=True,
    )


def over_pools(frontiers: pd.DataFrame, by: list[str], level: float = LEVEL) -> pd.DataFrame:
    """Per group of `by` and deadline of `frontiers` (pool_frontiers rows, several pools): the
    mean best val loss (nats/token) over pools with its `level` t interval over pools ("low",
    "high"; NaN ends with fewer than two pools) and the pools it is over; only where every pool
    reaches the deadline."""
    rows = []
    pools = frontiers["pool"].nunique()
    for key, part in frontiers.groupby([*by, "deadline"]):
        losses = part["best_val_loss"].dropna()
        if len(losses) < pools:
            continue
        d = t_interval(losses.to_numpy(), level)
        ends = (d.low, d.high) if np.isfinite(d.low) else (np.nan, np.nan)
        rows.append(
            dict(zip([*by, "deadline"], key))
            | {"mean": d.value, "low": ends[0]}
            | {"high": ends[1], "pools": len(losses)}
        )
    return pd.DataFrame(rows, columns=[*by, "deadline", "mean", "low", "high", "pools"])


def best_per_batch(results: Results, gpus: int, deadline: float, step_time) -> pd.DataFrame:
    """Best observed evaluation of each batch size alone on `gpus` GPUs within `deadline` (units of
    `step_time`), over all its runs (every lr, weight decay and epoch budget): index batch_size,
    columns run_id, step, val_loss (nats/token). Ties go to the earlier step."""
    points = _points(results)
    feasible = points[eval_costs(points, gpus, step_time) <= deadline]
    best = (
        feasible.sort_values(["val_loss", "step"], kind="mergesort").groupby("batch_size").head(1)
    )
    return best.set_index("batch_size")[["run_id", "step", "val_loss"]].sort_index()


def latency_speedup(gpus_per_replica: int, efficiency: float) -> float:
    """Projected step-time speed-up of k-way latency-oriented parallelism at parallel efficiency
    e."""
    if gpus_per_replica < 1 or not 0 <= efficiency <= 1:
        raise ValueError("gpus_per_replica must be >= 1 and efficiency in [0, 1]")
    return 1 + efficiency * (gpus_per_replica - 1)


# --- the notebook's preparation: step pricing, deadlines, schedule policies ---------------------


def unit_step_time(micro_batch: int, allreduce_units: float = 0.0) -> Callable[[int, int], float]:
    """step_time(B, G) of the idealised model, in step units (step_units with `micro_batch`
    sequences per GPU per unit)."""

    def step_time(batch_size: int, gpus: int) -> float:
        return step_units(batch_size, gpus, micro_batch, allreduce_units)

    return step_time


def deadline_grid(results: Results, gpu_counts, step_time, n: int = 24) -> np.ndarray:
    """`n` log-spaced deadlines (step units, rounded to 0.1, duplicates dropped) from the earliest
    evaluation on the most GPUs to the last evaluation on one GPU."""
    points = results.evals.merge(results.runs[["run_id", "batch_size"]], on="run_id")
    pairs = list(zip(points["batch_size"], points["step"]))
    first = min(step_time(int(b), max(gpu_counts)) * s for b, s in pairs)
    last = max(step_time(int(b), 1) * s for b, s in pairs)
    return np.unique(np.geomspace(first, last, n).round(1))


def schedule_policies(
    fixed_frontiers: pd.DataFrame,
    scheduled: Results,
    schedules: dict[str, str],
    gpu_counts,
    deadlines,
    step_time,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each batch-size schedule (its runs in `scheduled`) as a policy on each of `gpu_counts` and
    each pool, against the best fixed batch there (`fixed_frontiers`: pool_frontiers of the
    fixed-batch runs). Returns (the schedules' frontiers with `policy` (its name and
    batch_schedules.schedule_words) and `pool` columns, one row per policy x GPUs x pool:
    deadlines reachable and deadlines where it beats every fixed batch)."""
    frontiers, rows = [], []
    for (pool, g), fixed in fixed_frontiers[fixed_frontiers["gpus"].isin(gpu_counts)].groupby(
        ["pool", "gpus"]
    ):
        for name, schedule in schedules.items():
            runs = scheduled.runs
            mine = scheduled.subset((runs["batch_schedule"] == schedule) & (runs["pool"] == pool))
            policy = frontier(mine, [g], deadlines, step_time)
            frontiers.append(policy.assign(policy=f"{name}: {schedule_words(schedule)}", pool=pool))
            both = policy.merge(fixed, on="deadline", suffixes=("_schedule", "_fixed")).dropna(
                subset=["best_val_loss_schedule"]
            )
            wins = both["best_val_loss_schedule"] < both["best_val_loss_fixed"]
            rows.append(
                {
                    "policy": name,
                    "gpus": g,
                    "pool": pool_label(pool),
                    "deadlines reachable": len(both),
                    "deadlines where it beats every fixed batch": int(wins.sum()),
                }
            )
    return pd.concat(frontiers, ignore_index=True), pd.DataFrame(rows)
